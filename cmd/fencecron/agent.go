package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/agent"
	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/faults"
	"github.com/fencecron/fencecron/scheduler/wire"
)

func runAgent(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the node's config file (see deploy/examples/fencecron.yaml)")
	logFormat := logFormatFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return flag.ErrHelp
	}
	// First: a release build refuses FENCECRON_FAULTS (it has no fault
	// hooks), whatever the config says.
	faults, err := faults.ParseFaults(os.Getenv("FENCECRON_FAULTS"))
	if err != nil {
		return fmt.Errorf("FENCECRON_FAULTS: %w", err)
	}
	f, err := config.Load(*path)
	if err != nil {
		return err
	}
	if !f.Has(config.SectionNode) {
		return fmt.Errorf("%s: an agent's config needs a node section", *path)
	}
	logCfg, err := withLogFormat(f.Log, *logFormat)
	if err != nil {
		return err
	}
	log := newLogger(stderr, logCfg)
	log.Info("fencecron agent", "config", *path, "node", f.Node.Name, "data", f.Node.DataDir)
	raiseProcs(log)
	for _, w := range f.Warnings {
		log.Warn("config: "+w.Msg, "at", w.Pos.String(), "field", w.Path)
	}

	nodeJobs, err := agent.ConfigJobs(*path, f)
	if err != nil {
		return err
	}
	return agent.Run(ctx, f, agent.Options{Logger: log, Faults: faults, Jobs: nodeJobs})
}

func runApply(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var dry bool
	c, rest, err := clientFlags("apply", args, stdout, stderr, 1, "[-dry-run] FILE|DIR", func(fs *flag.FlagSet) {
		fs.BoolVar(&dry, "dry-run", false, "print the jobs applying would add, remove and change (with the changed fields, old → new); apply nothing")
	})
	if err != nil {
		return err
	}
	// A set of 100,000 jobs is tens of MiB the leader decodes, checks and
	// commits: give it longer than a look-up.
	c.http.Timeout = applyTimeout
	bigHeap()
	specs, err := readJobSet(rest[0])
	if err != nil {
		return err // every problem, with its position; nothing was sent
	}
	if dry {
		return dryRun(ctx, c, rest[0], specs, stdout)
	}
	host, _ := os.Hostname()
	source := fmt.Sprintf("fencecron apply %s from %s", rest[0], host)
	// A set of 100,000 jobs is some 30 MiB of JSON: it is encoded on
	// every core while it is sent, so the node reads the start of it
	// while the end is being encoded, and the command never holds it
	// whole.
	body, w := io.Pipe()
	encoded := make(chan struct{})
	go func() {
		defer close(encoded)
		w.CloseWithError(writeJobSetRequest(w, source, specs))
	}()
	var out wire.JobSetApplied
	err = c.do(ctx, "PUT", "/api/v1/jobset", body, &out)
	body.Close() // an encoder still writing stops
	<-encoded
	if err != nil || c.json {
		return err
	}
	fmt.Fprintf(stdout, "applied %d %s from %s: job set %s\n", out.Jobs, plural(out.Jobs, "job", "jobs"), rest[0], out.Hash)
	if len(out.Namespaces) > 0 {
		fmt.Fprintf(stdout, "%s\n", scopeLine(out.Namespaces, "replaced", "kept"))
	}
	return nil
}

// writeJobSetRequest writes the body of PUT /api/v1/jobset
// (wire.JobSetRequest) as json.Marshal would.
func writeJobSetRequest(w io.Writer, source string, specs []jobs.Spec) error {
	src, err := json.Marshal(source)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	fmt.Fprintf(bw, `{"source":%s,"jobs":`, src)
	if err := jobs.EncodeSpecs(bw, specs); err != nil {
		return err
	}
	bw.WriteString("}")
	return bw.Flush()
}

// applyTimeout bounds `fencecron apply`'s one request.
const applyTimeout = 2 * time.Minute

// readJobSet reads what `apply` sends: a file's jobs section (with its
// node.jobs_dir's jobs, if it names one), or every job file of a
// directory (config.JobFilesIn), each file checked on its own and names
// unique across them.
func readJobSet(path string) ([]jobs.Spec, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		paths, err := config.JobFilesIn(path)
		if err != nil {
			return nil, err
		}
		set, err := config.LoadJobFiles(paths)
		if err != nil {
			return nil, err
		}
		return set.Jobs, nil
	}
	// Only the jobs are sent, and nothing in them is ${}-expanded: the
	// node section's variables need not be set here.
	f, err := config.LoadAllowUnset(path)
	if err != nil {
		return nil, err
	}
	for _, u := range f.Unset {
		if u.Path == "node.jobs_dir" {
			return nil, fmt.Errorf("%s", u)
		}
	}
	if err := checkNotEmpty(f); err != nil {
		return nil, err
	}
	if f.Node.JobsDir != "" {
		// A node's config: its jobs and its jobs_dir's, as SIGHUP reads
		// them.
		set, err := f.NodeJobs()
		if err != nil {
			return nil, err
		}
		return set.Jobs, nil
	}
	if !f.Has(config.SectionJobs) {
		return nil, fmt.Errorf("%s has no jobs section: applying it would remove every job; write `jobs: []` to mean that", path)
	}
	return f.Jobs, nil
}

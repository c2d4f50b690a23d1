package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/agent"
	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/jobfile"
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
	if dry {
		specs, err := jobfile.ReadSet(rest[0])
		if err != nil {
			return err // every problem, with its position; nothing was sent
		}
		return dryRun(ctx, c, rest[0], specs, stdout)
	}
	set, err := jobfile.Load(rest[0])
	if err != nil {
		return err // every problem, with its position; nothing was sent
	}
	defer set.Saved()
	host, _ := os.Hostname()
	source := fmt.Sprintf("fencecron apply %s from %s", rest[0], host)
	loaded := set
	out, sent, err := applyChanges(ctx, c, source, set)
	byChanges := err == nil
	if errors.Is(err, errByDigest) {
		out, sent, err = applyByDigest(ctx, c, source, set)
	}
	if errors.Is(err, errReadWhole) {
		// The node lacks a job the cache vouched for: read the file whole.
		if set, err = set.Whole(); err != nil {
			return err
		}
		out, sent, err = applyByDigest(ctx, c, source, set)
	}
	if errors.Is(err, errSendWhole) {
		if set, err = set.Whole(); err != nil {
			return err
		}
		out, err = applyWhole(ctx, c, source, set.Specs())
		sent = len(set.Specs())
	}
	if err != nil {
		return err
	}
	if out.Namespaces == nil && set == loaded {
		// The node's set is now the file's jobs, as the cache holds them.
		// (Not after a read whole where the cache could not vouch for a
		// job: what it holds may be what the node lacked.)
		loaded.Learnt(out.Hash)
	}
	if c.json {
		return nil
	}
	fmt.Fprintf(stdout, "applied %d %s from %s: job set %s\n", out.Jobs, plural(out.Jobs, "job", "jobs"), rest[0], out.Hash)
	if len(out.Namespaces) > 0 {
		fmt.Fprintf(stdout, "%s\n", scopeLine(out.Namespaces, "replaced", "kept"))
	}
	switch {
	case byChanges:
		fmt.Fprintf(stdout, "sent the changes since job set %s: %d new or changed %s whole, %d removed; the node had the other %d\n",
			loaded.Base(), sent, plural(sent, "job", "jobs"), len(loaded.Removed()), set.Len()-sent)
	case sent < set.Len():
		fmt.Fprintf(stdout, "sent %d new or changed %s whole; the node had the other %d\n", sent, plural(sent, "job", "jobs"), set.Len()-sent)
	}
	return nil
}

// errByDigest is why applyChanges did not apply: no set the file's last
// apply made is known, the node's set is another (an apply since, of
// another file or from another place), or the node does not serve the
// path (an earlier version, or a worker).
var errByDigest = errors.New("send the set by digest")

// applyChanges applies set through PUT /api/v1/jobset/changes: the specs
// of the jobs the file's cache did not know and the names of those the
// file no longer has, against the set the file's last apply made
// (jobfile.Set.Base), so that a one-job edit of a file of 100,000 jobs sends
// one spec. It returns how many specs it sent whole, or errByDigest
// having applied nothing.
func applyChanges(ctx context.Context, c *client, source string, set *jobfile.Set) (wire.JobSetApplied, int, error) {
	if set.Base() == "" {
		return wire.JobSetApplied{}, 0, errByDigest
	}
	req := wire.JobSetChanges{Source: source, Base: set.Base(), Specs: set.Changed(), Remove: set.Removed()}
	var ans struct {
		Applied json.RawMessage `json:"applied"`
		Set     string          `json:"set"`
	}
	err := c.call(ctx, http.MethodPut, jobSetPath+"/changes", bytes.NewReader(wire.AppendJobSetChanges(nil, req)), &ans)
	switch {
	case notServed(err):
		return wire.JobSetApplied{}, 0, errByDigest
	case err != nil:
		return wire.JobSetApplied{}, 0, err
	case len(ans.Applied) == 0:
		return wire.JobSetApplied{}, 0, errByDigest
	}
	out, err := appliedAnswer(c, ans.Applied)
	return out, len(req.Specs), err
}

// notServed reports whether err is a node's word that it does not serve
// a job set path: an earlier version, or a worker, which holds no set.
func notServed(err error) bool {
	return errors.Is(err, wire.ErrNoRoute) || errors.Is(err, wire.ErrMethod) || errors.Is(err, wire.ErrMisdirected)
}

// appliedAnswer decodes the set an exchange applied, as the node wrote
// it; with -json, it alone is the command's output.
func appliedAnswer(c *client, applied json.RawMessage) (wire.JobSetApplied, error) {
	var out wire.JobSetApplied
	if err := json.Unmarshal(applied, &out); err != nil {
		return out, err
	}
	if c.json {
		c.out.Write(append(applied, '\n'))
	}
	return out, nil
}

// errSendWhole is why applyByDigest did not apply: the node cannot take
// a set by digest (a node of an earlier version), or lacks most of it.
var errSendWhole = errors.New("send the whole set")

// errReadWhole is why applyByDigest did not apply a set read through the
// cache: the node lacks a job the cache cannot vouch for (specsOf).
var errReadWhole = errors.New("read the whole file")

// applyByDigest applies set through PUT /api/v1/jobset/digests: the
// jobs' digests first, then the specs of those the node lacks, so that a
// change to a few jobs of a large set sends those few. A set read through
// the cache sends, with its digests, the specs of the jobs the cache did
// not know, which are most often the node's new and changed ones: the
// node then applies on the first request. It returns how many specs it
// sent whole. It fails with errSendWhole, having applied nothing, where
// sending the whole set is the way: the node does not serve the path (an
// earlier version, or a worker, which holds no set), lacks more than half
// the jobs (a first apply), or its set changed between the two requests;
// and with errReadWhole where the node lacks a job whose spec the set
// cannot vouch for (jobfile.Set.SpecsOf). The exchange's answers are not the
// command's: with -json, the applied set's answer alone is written.
func applyByDigest(ctx context.Context, c *client, source string, set *jobfile.Set) (wire.JobSetApplied, int, error) {
	// A node holding fewer than half as many jobs lacks more than half:
	// its status says so before any digest is computed or sent.
	var st wire.Status
	if err := c.call(ctx, http.MethodGet, "/api/v1/status", nil, &st); err == nil && 2*st.Jobs.Count < set.Len() {
		return wire.JobSetApplied{}, 0, errSendWhole
	}
	digests := set.Digests()
	req := wire.JobSetDigests{Source: source, Jobs: make([]wire.JobDigest, set.Len())}
	for i, name := range set.Names() {
		req.Jobs[i] = wire.JobDigest{Name: name, Digest: digests[i]}
	}
	req.Specs = append(req.Specs, set.Changed()...)
	for round := 0; round < 2; round++ {
		// Applied is kept as the node wrote it, for -json.
		var ans struct {
			Applied json.RawMessage `json:"applied"`
			Need    []string        `json:"need"`
		}
		body, err := wire.AppendJobSetDigests(nil, req)
		if err != nil {
			return wire.JobSetApplied{}, 0, err
		}
		err = c.call(ctx, http.MethodPut, jobSetPath+"/digests", bytes.NewReader(body), &ans)
		if notServed(err) {
			return wire.JobSetApplied{}, 0, errSendWhole
		}
		if err != nil {
			return wire.JobSetApplied{}, 0, err
		}
		if len(ans.Applied) > 0 {
			out, err := appliedAnswer(c, ans.Applied)
			return out, len(req.Specs), err
		}
		if round > 0 || 2*len(ans.Need) > set.Len() {
			break
		}
		// Asked for only when the node lacks jobs: most applies by digest
		// never build it.
		byName := make(map[string]int, set.Len())
		for i, name := range set.Names() {
			byName[name] = i
		}
		idx := make([]int, len(ans.Need))
		for k, name := range ans.Need {
			i, ok := byName[name]
			if !ok {
				return wire.JobSetApplied{}, 0, fmt.Errorf("the node asked for job %q, which is not in the set", name)
			}
			idx[k] = i
		}
		specs, ok := set.SpecsOf(idx)
		if !ok {
			return wire.JobSetApplied{}, 0, errReadWhole
		}
		req.Specs = append(req.Specs, specs...)
	}
	return wire.JobSetApplied{}, 0, errSendWhole
}

// applyWhole applies specs through PUT /api/v1/jobset. A set of 100,000
// jobs is some 30 MiB of JSON: it is encoded on every core while it is
// sent, so the node reads the start of it while the end is being
// encoded, and the command never holds it whole.
func applyWhole(ctx context.Context, c *client, source string, specs []jobs.Spec) (wire.JobSetApplied, error) {
	body, w := io.Pipe()
	encoded := make(chan struct{})
	go func() {
		defer close(encoded)
		w.CloseWithError(writeJobSetRequest(w, source, specs))
	}()
	var out wire.JobSetApplied
	// The count lets the node decode the set as it arrives.
	err := c.do(ctx, "PUT", jobSetPath, withHeader{body, wire.JobCountHeader, strconv.Itoa(len(specs))}, &out)
	body.Close() // an encoder still writing stops
	<-encoded
	return out, err
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

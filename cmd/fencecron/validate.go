package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/jobfile"
	"github.com/fencecron/fencecron/jobs"
)

// fireTimesShown is how many upcoming fire times validate lists per job.
const fireTimesShown = 5

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: fencecron validate FILE|DIR

Checks a config file (and the job files of its node.jobs_dir), or a
directory of job files. Prints every problem as file:line:column: message
and exits 1, or prints each job with its next fire times and exits 0.
Warnings (a literal secret in a file others may read, jobs whose token
scopes overlap, an output key outside its own job's scope) go to stderr
and do not change the exit status.
`)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return flag.ErrHelp
	}
	bigHeap()
	return validateFile(fs.Arg(0), time.Now(), stdout, stderr)
}

// bigHeap lets a short-lived command that reads a large job set (apply,
// validate) grow its heap before collecting: a file of 100,000 jobs
// decodes into a tree of millions of nodes that all stay live until the
// decoding ends, and collecting every time the heap doubles on the way
// spends more time than the decoding itself.
func bigHeap() { debug.SetGCPercent(400) }

// reportProblems prints the problems of an invalid file or directory,
// and the exit status 1; it returns err itself if it is not about the
// content.
func reportProblems(path string, err error, stderr io.Writer) error {
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		return err
	}
	for _, u := range cerr.Unset {
		fmt.Fprintf(stderr, "warning: %s (checked without it; the node needs it set to start)\n", u)
	}
	files := map[string]bool{}
	for _, p := range cerr.Problems {
		fmt.Fprintln(stderr, p)
		files[p.File] = true
	}
	n := len(cerr.Problems)
	if len(files) > 1 {
		fmt.Fprintf(stderr, "%s: %d %s in %d files\n", path, n, plural(n, "problem", "problems"), len(files))
	} else {
		fmt.Fprintf(stderr, "%s: %d %s\n", path, n, plural(n, "problem", "problems"))
	}
	return exitCode(1)
}

// validateFile checks the config file at path and reports on it as of
// now: problems to stderr (and exit status 1), or a summary to stdout.
func validateFile(path string, now time.Time, stdout, stderr io.Writer) error {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return validateDir(path, now, stdout, stderr)
	}
	// Unset ${NAME}s are warnings here: a config is checked in CI
	// without its secrets; the node refuses to start without them.
	f, err := config.LoadAllowUnset(path)
	if err != nil {
		return reportProblems(path, err, stderr)
	}
	for _, u := range f.Unset {
		fmt.Fprintf(stderr, "warning: %s (checked without it; the node needs it set to start)\n", u)
	}
	if err := jobfile.CheckNotEmpty(f); err != nil {
		fmt.Fprintln(stderr, err)
		return exitCode(1)
	}
	// A node's jobs_dir is checked with its config: the node would
	// refuse to start without it.
	set, err := f.NodeJobs()
	if err != nil {
		return reportProblems(path, err, stderr)
	}
	// Warnings do not make the file invalid: the node starts, and logs
	// them too.
	for _, w := range set.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	writeWarnings(stderr, f.Name, set.Jobs, now)
	return writeSummary(stdout, f, set, now)
}

// validateDir checks a directory of job files, as `fencecron apply DIR`
// reads it.
func validateDir(dir string, now time.Time, stdout, stderr io.Writer) error {
	paths, err := config.JobFilesIn(dir)
	if err != nil {
		return err
	}
	set, err := config.LoadJobFiles(paths)
	if err != nil {
		return reportProblems(dir, err, stderr)
	}
	for _, w := range set.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	writeWarnings(stderr, dir, set.Jobs, now)
	fmt.Fprintf(stdout, "%s: valid: %d %s\n", dir, len(set.Files), plural(len(set.Files), "file", "files"))
	return writeJobs(stdout, set.Jobs, now)
}

// writeWarnings reports what is valid but probably not meant: jobs whose
// token scopes overlap (one job's `fencecron publish` can overwrite the
// other's keys, and they share one quota), and outputs outside their own
// job's scope (the job cannot `fencecron publish` to its own output key).
func writeWarnings(w io.Writer, name string, specs []jobs.Spec, now time.Time) {
	for _, o := range jobs.ScopeOverlaps(specs) {
		if o.OuterPrefix == o.InnerPrefix {
			fmt.Fprintf(w, "warning: %s: jobs %s and %s share the token scope %q: each can publish over the other's keys, and they share its quota\n",
				name, o.Outer, o.Inner, o.OuterPrefix)
			continue
		}
		fmt.Fprintf(w, "warning: %s: job %s's token scope %q lies inside job %s's scope %q: %s can publish over %s's keys\n",
			name, o.Inner, o.InnerPrefix, o.Outer, o.OuterPrefix, o.Outer, o.Inner)
	}
	for _, spec := range specs {
		key, err := spec.OutputKey(now)
		if err != nil || !spec.OutputOutsideScope(key) {
			continue
		}
		fmt.Fprintf(w, "warning: %s: job %s's output %q is outside its token scope %q (its output template has no literal directory): the worker publishes its stdout there, but the job's own `fencecron publish` to it is refused; give the template a directory, such as %q\n",
			name, spec.Name, key, spec.OutputPrefix(), spec.Name+"/"+spec.Output)
	}
}

// writeSummary describes a valid file: the node, the store, and each job
// with its next fire times in its own time zone.
func writeSummary(w io.Writer, f *config.File, set *config.JobFiles, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: valid\n", f.Name)
	if f.Has(config.SectionNode) {
		n := f.Node
		role := "server"
		if !n.Server {
			role = "worker"
		}
		fmt.Fprintf(&b, "node %s (%s) advertise %s, ports http %d gossip %d raft %d, data %s\n",
			n.Name, role, n.Advertise, n.Ports.HTTP, n.Ports.Gossip, n.Ports.Raft, n.DataDir)
		if len(n.Join) > 0 {
			fmt.Fprintf(&b, "joins %s\n", strings.Join(n.Join, ", "))
		}
		if n.BootstrapExpect > 0 {
			fmt.Fprintf(&b, "bootstraps with %d %s\n", n.BootstrapExpect, plural(n.BootstrapExpect, "server", "servers"))
		}
		fmt.Fprintf(&b, "cluster profile %s\n", f.Cluster.Profile)
	}
	if f.Has(config.SectionStore) || f.Has(config.SectionNode) {
		s := f.Store
		where := s.URL
		if s.Backend == config.BackendBolt {
			where = f.StorePath()
		}
		if s.Backend == config.BackendPostgres {
			where = "(url hidden)"
		}
		served := ""
		if s.Serve {
			served = ", served over HTTP"
		}
		fmt.Fprintf(&b, "store %s %s%s\n", s.Backend, where, served)
	}
	if dir := f.JobsDirPath(); dir != "" {
		fmt.Fprintf(&b, "jobs_dir %s: %d job %s\n", dir, len(set.Files)-1, plural(len(set.Files)-1, "file", "files"))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return writeJobs(w, set.Jobs, now)
}

// maxJobsListed bounds the jobs validate lists with their fire times;
// the others are counted.
const maxJobsListed = 1000

// writeJobs describes a valid job set: each job (up to maxJobsListed)
// with its next fire times in its own time zone.
func writeJobs(w io.Writer, specs []jobs.Spec, now time.Time) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%d %s, hash %s\n", len(specs), plural(len(specs), "job", "jobs"), jobs.HashSpecs(specs))
	for i, spec := range specs {
		if i == maxJobsListed {
			fmt.Fprintf(bw, "\nand %d more %s, not listed\n", len(specs)-i, plural(len(specs)-i, "job", "jobs"))
			break
		}
		var b strings.Builder
		b.WriteString("\n")
		writeJob(&b, spec, now)
		bw.WriteString(b.String())
	}
	return bw.Flush()
}

func writeJob(b *strings.Builder, spec jobs.Spec, now time.Time) {
	var notes []string
	if spec.Timezone != "UTC" || spec.DST != (jobs.DSTPolicy{Spring: jobs.SpringShift, Fall: jobs.FallOnce}) {
		notes = append(notes, fmt.Sprintf("dst spring %s, fall %s", spec.DST.Spring, spec.DST.Fall))
	}
	if spec.Jitter > 0 {
		notes = append(notes, "jitter up to "+spec.Jitter.String())
	}
	if spec.Paused {
		notes = append(notes, "paused")
	}
	if len(spec.Schedules) == 0 && len(spec.After) > 0 {
		fmt.Fprintf(b, "%s: after %s (for each of their scheduled times, once all succeeded)\n", spec.Name, strings.Join(spec.After, ", "))
		return
	}
	fmt.Fprintf(b, "%s: %s in %s", spec.Name, strings.Join(spec.Schedules, " | "), spec.Timezone)
	if len(notes) > 0 {
		fmt.Fprintf(b, " (%s)", strings.Join(notes, "; "))
	}
	b.WriteString("\n")
	sched, err := spec.Schedule()
	if err != nil {
		// Parse validated it; this would be a bug, so say so.
		fmt.Fprintf(b, "  cannot compute fire times: %v\n", err)
		return
	}
	times := sched.NextN(now, fireTimesShown)
	if len(times) == 0 {
		b.WriteString("  no fire time within five years\n")
	}
	for _, t := range times {
		fmt.Fprintf(b, "  %s", t.Format("Mon 2006-01-02 15:04:05 MST"))
		if j := spec.JitterFor(t); j > 0 {
			fmt.Fprintf(b, "  +%s jitter", j)
		}
		b.WriteString("\n")
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/jobs"
)

// fireTimesShown is how many upcoming fire times validate lists per job.
const fireTimesShown = 5

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: fencecron validate FILE

Checks a config file. Prints every problem as file:line:column: message
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
	return validateFile(fs.Arg(0), time.Now(), stdout, stderr)
}

// validateFile checks the config file at path and reports on it as of
// now: problems to stderr (and exit status 1), or a summary to stdout.
func validateFile(path string, now time.Time, stdout, stderr io.Writer) error {
	f, err := config.Load(path)
	var cerr *config.Error
	if errors.As(err, &cerr) {
		for _, p := range cerr.Problems {
			fmt.Fprintln(stderr, p)
		}
		fmt.Fprintf(stderr, "%s: %d %s\n", path, len(cerr.Problems), plural(len(cerr.Problems), "problem", "problems"))
		return exitCode(1)
	}
	if err != nil {
		return err
	}
	// Warnings do not make the file invalid: the node starts, and logs
	// them too.
	for _, w := range f.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	writeWarnings(stderr, f, now)
	return writeSummary(stdout, f, now)
}

// writeWarnings reports what is valid but probably not meant: jobs whose
// token scopes overlap (one job's `fencecron publish` can overwrite the
// other's keys, and they share one quota), and outputs outside their own
// job's scope (the job cannot `fencecron publish` to its own output key).
func writeWarnings(w io.Writer, f *config.File, now time.Time) {
	for _, o := range jobs.ScopeOverlaps(f.Jobs) {
		if o.OuterPrefix == o.InnerPrefix {
			fmt.Fprintf(w, "warning: %s: jobs %s and %s share the token scope %q: each can publish over the other's keys, and they share its quota\n",
				f.Name, o.Outer, o.Inner, o.OuterPrefix)
			continue
		}
		fmt.Fprintf(w, "warning: %s: job %s's token scope %q lies inside job %s's scope %q: %s can publish over %s's keys\n",
			f.Name, o.Inner, o.InnerPrefix, o.Outer, o.OuterPrefix, o.Outer, o.Inner)
	}
	for _, spec := range f.Jobs {
		key, err := spec.OutputKey(now)
		if err != nil || !spec.OutputOutsideScope(key) {
			continue
		}
		fmt.Fprintf(w, "warning: %s: job %s's output %q is outside its token scope %q (its output template has no literal directory): the worker publishes its stdout there, but the job's own `fencecron publish` to it is refused; give the template a directory, such as %q\n",
			f.Name, spec.Name, key, spec.OutputPrefix(), spec.Name+"/"+spec.Output)
	}
}

// writeSummary describes a valid file: the node, the store, and each job
// with its next fire times in its own time zone.
func writeSummary(w io.Writer, f *config.File, now time.Time) error {
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
	fmt.Fprintf(&b, "%d %s, hash %s\n", len(f.Jobs), plural(len(f.Jobs), "job", "jobs"), f.JobsHash())
	for _, spec := range f.Jobs {
		b.WriteString("\n")
		writeJob(&b, spec, now)
	}
	_, err := io.WriteString(w, b.String())
	return err
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

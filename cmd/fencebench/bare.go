package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/executor"
)

// The lateness of a burst has a floor that is the machine's, not the
// scheduler's: `rate` jobs due at one instant are `rate` processes to
// fork, exec and let run on a few CPUs, and each new one waits for the
// CPU the ones before it take. /bin/true on a virtual machine can cost a
// millisecond of CPU before main (the dynamic loader asking the CPU
// about its caches, an exit to the hypervisor each time). So beside each
// cluster's figures the harness measures the same starts made with
// nothing else running: three processes of its own (as many as the
// cluster has workers) start them, every second, at the second, the way
// a worker does. That is not a proof of a floor, but a reference: how
// late a program that does nothing else starts the same burst on the
// same machine; how far above it the cluster is, is the scheduler's.

// bareResult is what the bare starts of one rate measured.
type bareResult struct {
	rate     int
	lateness []time.Duration
	failed   int
	// cpu is the CPU time of the starting processes and their jobs.
	cpu time.Duration
}

// bareProcs is how many processes make the bare starts: as many as the
// cluster has workers, so that neither side has more processes to fork
// from than the other (forks within one Go process take turns).
const bareProcs = 3

// childEnv marks a process this harness started to make bare starts, so
// that a test binary, which is not this command, can act as one.
const childEnv = "FENCEBENCH_CHILD"

// bareStarts has bareProcs processes of this executable start `rate`
// /bin/true processes between them at each whole second of a window of
// `window`, and gathers when each start's exec ended after its second.
func bareStarts(parent context.Context, rate int, window time.Duration) (bareResult, error) {
	res := bareResult{rate: rate}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	// One failed process ends the others: the reference is all three.
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	// The first second leaves the processes time to start.
	first := time.Now().Truncate(time.Second).Add(2 * time.Second)
	seconds := int(window / time.Second)
	type answer struct {
		out []byte
		cpu time.Duration
		err error
	}
	answers := make(chan answer, bareProcs)
	for i := range bareProcs {
		share := rate / bareProcs
		if i < rate%bareProcs {
			share++
		}
		cmd := exec.CommandContext(ctx, exe, "starts", "-rate", strconv.Itoa(share),
			"-at", strconv.FormatInt(first.UnixNano(), 10), "-seconds", strconv.Itoa(seconds))
		cmd.Env = append(os.Environ(), childEnv+"=starts")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		go func() {
			out, err := cmd.Output()
			if err != nil {
				cancel()
				err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(stderr.Bytes()))
			}
			var cpu time.Duration
			if st := cmd.ProcessState; st != nil {
				// A process's times include those of the children it
				// reaped: here, its jobs.
				cpu = st.UserTime() + st.SystemTime()
			}
			answers <- answer{out, cpu, err}
		}()
	}
	var errs []error
	for range bareProcs {
		a := <-answers
		res.cpu += a.cpu
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		for line := range strings.Lines(string(a.out)) {
			line = strings.TrimSpace(line)
			if line == "failed" {
				res.failed++
				continue
			}
			ns, err := strconv.ParseInt(line, 10, 64)
			if err != nil {
				cancel()
				errs = append(errs, fmt.Errorf("bad line %q", line))
				break
			}
			res.lateness = append(res.lateness, time.Duration(ns))
		}
	}
	if err := parent.Err(); err != nil {
		return res, err // the children were killed for it: say why
	}
	return res, errors.Join(errs...)
}

// runStarts is one of bareStarts' processes: it starts -rate /bin/true
// processes at each of -seconds whole seconds from -at, each the way a
// worker starts a job (executor.Run, lowered to the default job priority
// once exec'd, waiting on a timer of its own from half a second before, as
// a run granted ahead does), and prints each one's lateness in
// nanoseconds, or "failed", a line each, once all are reaped.
func runStarts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("starts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rate := fs.Int("rate", 0, "processes to start each second")
	firstNS := fs.Int64("at", 0, "the first second, in Unix nanoseconds")
	seconds := fs.Int("seconds", 0, "how many seconds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate < 0 || *seconds < 0 || *rate > 100_000 || *seconds > 3600 {
		return fmt.Errorf("starts: -rate %d for -seconds %d: out of bounds", *rate, *seconds)
	}
	spawn, err := executor.NewSpawner(config.DefaultJobNice)
	if err != nil {
		return err
	}
	defer spawn.Close()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		late   []time.Duration
		failed int
	)
	first := time.Unix(0, *firstNS)
	for s := range *seconds {
		at := first.Add(time.Duration(s) * time.Second)
		if !jobs.Sleep(ctx, jobs.SystemClock{}, time.Until(at.Add(-time.Second/2))) {
			break
		}
		for range *rate {
			wg.Go(func() {
				if !jobs.Sleep(ctx, jobs.SystemClock{}, time.Until(at)) {
					return
				}
				var started time.Duration
				r := executor.Run(ctx, executor.Request{
					Argv:    []string{"/bin/true"},
					Timeout: 10 * time.Second,
					Grace:   2 * time.Second,
					Stdout:  io.Discard,
					Stderr:  io.Discard,
					Spawner: spawn,
					OnStart: func(int) { started = time.Since(at) },
				})
				mu.Lock()
				defer mu.Unlock()
				if r.Err != nil || r.ExitCode != 0 {
					failed++
					return
				}
				late = append(late, started)
			})
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	for _, d := range late {
		fmt.Fprintln(w, int64(d))
	}
	for range failed {
		fmt.Fprintln(w, "failed")
	}
	return w.Flush()
}

// printBare writes the bare starts' table.
func printBare(w io.Writer, results []bareResult) error {
	if len(results) == 0 {
		return nil
	}
	fmt.Fprintf(w, "the machine's reference: the same starts with no cluster running, made by %d processes of this harness that do nothing else (every second,\n", bareProcs)
	fmt.Fprintln(w, "at the second, the rate's /bin/true processes, started as a worker starts them); how far above it a cluster's lateness is, is the scheduler's")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "fires/s\truns started\tlateness p50\tp99\tmax\tfailed\tCPU per run: starters and jobs\t")
	for _, r := range results {
		s := summarize(r.lateness)
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%d\t%s\t\n", r.rate, s.N, ms(s.P50), ms(s.P99), ms(s.Max), r.failed,
			msEach(r.cpu, len(r.lateness)+r.failed))
	}
	return tw.Flush()
}

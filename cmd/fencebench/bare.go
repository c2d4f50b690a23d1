package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
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
//
// An HTTP job starts no process, and its burst has a floor too: `rate`
// requests sent at one instant, and received, by processes that share the
// CPUs. Its reference is the same three processes sending, each second at
// the second, the same GETs to a receiver of the harness as the workers
// send them (each built half a second ahead, and sent through the
// worker's own client over the connections it keeps), timed where they
// arrive.

// bareResult is what the bare starts of one rate measured.
type bareResult struct {
	rate int
	// http: requests sent, not processes started.
	http     bool
	lateness []time.Duration
	failed   int
	// cpu is the CPU time of the starting processes and their jobs, over
	// made starts (warm-up included).
	cpu  time.Duration
	made int
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
// `window`, and gathers when each start's exec ended after its second;
// with httpJobs, send `rate` GETs instead, and gathers when each reached a
// receiver it runs.
func bareStarts(parent context.Context, rate int, window time.Duration, httpJobs bool) (bareResult, error) {
	res := bareResult{rate: rate, http: httpJobs}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	var recv *receiver
	if httpJobs {
		if recv, err = startReceiver(); err != nil {
			return res, err
		}
		defer recv.close()
	}
	// One failed process ends the others: the reference is all three.
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	// The first second leaves the processes time to start.
	first := time.Now().Truncate(time.Second).Add(2 * time.Second)
	seconds := int(window / time.Second)
	// Requests go over connections kept open between runs, as a worker's
	// do; the cluster opens them in its warm-up, the reference in a
	// first second of requests it does not count.
	warmup := 0
	if recv != nil {
		warmup = 1
	}
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
		args := []string{"starts", "-rate", strconv.Itoa(share),
			"-at", strconv.FormatInt(first.UnixNano(), 10), "-seconds", strconv.Itoa(warmup + seconds)}
		if recv != nil {
			args = append(args, "-url", fmt.Sprintf("%s/bare%d", recv.URL(), i), "-warmup", strconv.Itoa(warmup))
		}
		cmd := exec.CommandContext(ctx, exe, args...)
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
	res.made = rate * (warmup + seconds)
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
	if recv != nil {
		// A request's lateness is measured where it arrives.
		from := first.Add(time.Duration(warmup) * time.Second)
		res.lateness = recv.lateness(from, from.Add(time.Duration(seconds)*time.Second))
	}
	return res, errors.Join(errs...)
}

// runStarts is one of bareStarts' processes: it starts -rate /bin/true
// processes at each of -seconds whole seconds from -at, each the way a
// worker starts a job (executor.Run, lowered to the default job priority
// once exec'd, waiting on a timer of its own from half a second before, as
// a run granted ahead does), and prints each one's lateness in
// nanoseconds, or "failed", a line each, once all are reaped. With -url
// it sends a GET there instead, the way a worker sends an HTTP job's
// request (built ahead, sent at the second), and prints only "failed"
// for each that was not answered 200 after the first -warmup seconds:
// the receiver times the others.
func runStarts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("starts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rate := fs.Int("rate", 0, "processes to start each second")
	firstNS := fs.Int64("at", 0, "the first second, in Unix nanoseconds")
	seconds := fs.Int("seconds", 0, "how many seconds")
	url := fs.String("url", "", "send a GET here at each start instead of starting /bin/true")
	warmup := fs.Int("warmup", 0, "with -url: seconds at the start whose failures are not printed (they open the connections)")
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
	var clients executor.HTTPClients
	defer clients.CloseIdle()
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
		for i := range *rate {
			if *url != "" {
				wg.Go(func() {
					if !sendAt(ctx, &clients, *url, fmt.Sprintf("%s-%d-%d", *url, s, i), at) && s >= *warmup {
						mu.Lock()
						failed++
						mu.Unlock()
					}
				})
				continue
			}
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

// sendAt sends one GET to url at `at`, as a worker sends an HTTP job's
// request: built ahead (it is called half a second before), with a spare
// connection opened if the target has none (executor.PreparedHTTP.Warm),
// sent at the instant over a kept connection where one is idle. It
// reports whether it was answered 200 (or ctx ended before the instant:
// not a failure).
func sendAt(ctx context.Context, clients *executor.HTTPClients, url, id string, at time.Time) bool {
	p := clients.Prepare(executor.HTTPRequest{
		Method: http.MethodGet, URL: url, Timeout: 10 * time.Second,
		Header: http.Header{
			jobs.HTTPRunIDHeader:     {id},
			jobs.HTTPScheduledHeader: {at.UTC().Format(time.RFC3339)},
		},
		Expected: func(status int) bool { return status == http.StatusOK },
	})
	wctx, cancel := context.WithDeadline(ctx, at.Add(-50*time.Millisecond))
	p.Warm(wctx)
	cancel()
	if !jobs.Sleep(ctx, jobs.SystemClock{}, time.Until(at)) {
		return true
	}
	r := p.Send(ctx)
	return r.Err == nil && r.ExitCode == 0
}

// printBare writes the bare starts' table.
func printBare(w io.Writer, results []bareResult) error {
	if len(results) == 0 {
		return nil
	}
	fmt.Fprintf(w, "the machine's reference: the same starts with no cluster running, made by %d processes of this harness that do nothing else (every second,\n", bareProcs)
	fmt.Fprintln(w, "at the second, the rate's /bin/true processes, started as a worker starts them, or the rate's GETs to a receiver of the harness, sent as a worker sends them);")
	fmt.Fprintln(w, "how far above it a cluster's lateness is, is the scheduler's")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "jobs\tfires/s\truns started\tlateness p50\tp99\tmax\tfailed\tCPU per run: starters and jobs\t")
	for _, r := range results {
		s := summarize(r.lateness)
		kind := "process"
		if r.http {
			kind = "http"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t\n", kind, r.rate, s.N, msFine(s.P50), msFine(s.P99), msFine(s.Max), r.failed,
			msEach(r.cpu, r.made))
	}
	return tw.Flush()
}

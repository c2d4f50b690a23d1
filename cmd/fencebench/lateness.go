package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

func runLateness(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lateness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	rates := fs.String("rates", "10,100", "fires per second to measure, comma separated")
	duration := fs.Duration("duration", 30*time.Second, "measuring window per rate")
	warmup := fs.Duration("warmup", 5*time.Second, "time to let each cluster settle before measuring")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, dir, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "fires/s\truns started\tlateness p50\tp99\tmax\tcompleted runs/s\t")
	for _, field := range strings.Split(*rates, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || rate < 1 {
			return fmt.Errorf("-rates: bad rate %q", field)
		}
		r, err := measureRate(ctx, bin, filepath.Join(dir, fmt.Sprintf("rate-%d", rate)), rate, *warmup, *duration, stderr)
		if err != nil {
			return fmt.Errorf("%d fires/s: %w", rate, err)
		}
		s := summarize(r.lateness)
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%.1f\t\n", rate, s.N, ms(s.P50), ms(s.P99), ms(s.Max), r.completedPerSec)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "three servers and a store node on loopback; each job runs /bin/true every second; lateness = process start - scheduled time")
	return nil
}

type rateResult struct {
	lateness        []time.Duration
	completedPerSec float64
}

// measureRate runs `rate` jobs that each fire every second and follows
// the audit trail: a started event's time is when the worker started the
// process, and the run id carries the scheduled time.
func measureRate(ctx context.Context, bin, dir string, rate int, warmup, window time.Duration, stderr io.Writer) (rateResult, error) {
	var b strings.Builder
	for i := range rate {
		fmt.Fprintf(&b, "  - name: j%03d\n    schedule: \"* * * * * *\"\n    command: [\"/bin/true\"]\n    overlap: allow\n    timeout: 10s\n", i)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return rateResult{}, err
	}
	cl, err := localcluster.Start(localcluster.Options{
		Binary: bin, Dir: dir, Servers: 3, StoreNode: true, Profile: "default", Jobs: b.String(),
	})
	if err != nil {
		return rateResult{}, err
	}
	defer cl.Stop()
	a, err := waitAgreed(cl, 60*time.Second)
	if err != nil {
		return rateResult{}, err
	}
	watch := cl.Node(a.Leader)
	select {
	case <-ctx.Done():
		return rateResult{}, ctx.Err()
	case <-time.After(warmup):
	}
	var evs struct{ Events []jobs.Event }
	if err := watch.GetJSON("/api/v1/events?limit=1", &evs); err != nil {
		return rateResult{}, err
	}
	var after uint64
	if len(evs.Events) > 0 {
		after = evs.Events[0].Seq
	}
	var res rateResult
	completed := 0
	start := time.Now()
	for time.Since(start) < window && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		var evs struct{ Events []jobs.Event }
		if err := watch.GetJSON(fmt.Sprintf("/api/v1/events?after=%d&limit=5000", after), &evs); err != nil {
			return res, err
		}
		if len(evs.Events) > 0 && evs.Events[0].Seq > after+1 {
			fmt.Fprintf(stderr, "warning: %d events fell out of the trail between polls\n", evs.Events[0].Seq-after-1)
		}
		for _, e := range evs.Events {
			after = e.Seq
			switch e.Kind {
			case jobs.EventStarted:
				if sched, ok := scheduledOf(e.Run); ok {
					res.lateness = append(res.lateness, e.Time.Sub(sched))
				}
			case jobs.EventCompleted:
				completed++
			}
		}
	}
	res.completedPerSec = float64(completed) / time.Since(start).Seconds()
	return res, nil
}

// scheduledOf reads the scheduled time out of a run id (job@20060102T150405Z).
func scheduledOf(runID string) (time.Time, bool) {
	i := strings.LastIndexByte(runID, '@')
	if i < 0 {
		return time.Time{}, false
	}
	for _, layout := range []string{"20060102T150405Z", "20060102T150405.000Z"} {
		if t, err := time.Parse(layout, runID[i+1:]); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

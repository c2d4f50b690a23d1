package main

import (
	"context"
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
	fs, c := benchFlags("lateness", stderr)
	rates := fs.String("rates", "10,100", "fires per second to measure, comma separated")
	duration := fs.Duration("duration", 30*time.Second, "measuring window per rate")
	warmup := fs.Duration("warmup", 5*time.Second, "time to let each cluster settle before measuring")
	bin, dir, cleanup, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	defer cleanup()
	bins, labels := c.binaries(bin)

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "fires/s\truns started\tlateness p50\tp99\tmax\tcompleted runs/s\t"
	if len(bins) > 1 {
		header = "binary\t" + header
	}
	fmt.Fprintln(tw, header)
	for _, field := range strings.Split(*rates, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || rate < 1 {
			return fmt.Errorf("-rates: bad rate %q", field)
		}
		for i, b := range bins {
			r, err := measureRate(ctx, b, filepath.Join(dir, fmt.Sprintf("rate-%d-%d", rate, i)), rate, *warmup, *duration, stderr)
			if err != nil {
				return fmt.Errorf("%s, %d fires/s: %w", b, rate, err)
			}
			s := summarize(r.lateness)
			if len(bins) > 1 {
				fmt.Fprintf(tw, "%s\t", labels[i])
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%.1f\t\n", rate, s.N, ms(s.P50), ms(s.P99), ms(s.Max), r.completedPerSec)
		}
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

// measureRate runs `rate` jobs that each fire every second and reads the
// finished runs: an attempt's start time is when the worker started the
// process.
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
	// Every finished attempt records when its process started. Runs are
	// kept in the replicated state for a while (2000 of them), so polling
	// every second sees each one.
	var res rateResult
	seen := map[string]bool{}
	completed := 0
	start := time.Now()
	for time.Since(start) < window && ctx.Err() == nil {
		time.Sleep(time.Second)
		var out struct{ Runs []jobs.Run }
		if err := watch.GetJSON("/api/v1/runs?limit=2000", &out); err != nil {
			return res, err
		}
		for _, r := range out.Runs {
			a, ok := r.Latest()
			if !ok || !r.State.Terminal() || seen[r.ID] || a.GrantedAt.Before(start) {
				continue
			}
			seen[r.ID] = true
			completed++
			if !a.StartedAt.IsZero() {
				res.lateness = append(res.lateness, a.StartedAt.Sub(r.ScheduledAt))
			}
		}
	}
	res.completedPerSec = float64(completed) / time.Since(start).Seconds()
	return res, nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// runBackfill is `fencecron backfill [-addr ADDR] -from TIME -to TIME
// [-dry-run] [-max-running N] JOB`: one run per fire time of JOB's
// schedule in [from, to) that has none, trigger backfill, at most N open
// at once (POST /api/v1/jobs/{name}/backfill). JOB may come before the
// flags.
func runBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		args = append(slices.Clone(args[1:]), args[0])
	}
	var body wire.BackfillBody
	c, rest, err := clientFlags("backfill", args, stdout, stderr, 1, "-from TIME -to TIME [-dry-run] [-max-running N] JOB", func(fs *flag.FlagSet) {
		fs.StringVar(&body.From, "from", "", "first fire time to backfill, included: RFC 3339 (2026-07-01T00:00:00Z), or a date or 2006-01-02T15:04 in the job's time zone")
		fs.StringVar(&body.To, "to", "", "end of the range, excluded (same forms); not in the future")
		fs.BoolVar(&body.DryRun, "dry-run", false, "list the fire times it would create and those that already have a run; create nothing")
		fs.IntVar(&body.MaxRunning, "max-running", replicated.DefaultBackfillMaxRunning, fmt.Sprintf("at most this many backfill runs of the job open at once (1 to %d)", replicated.MaxBackfillMaxRunning))
	})
	if err != nil {
		return err
	}
	if body.From == "" || body.To == "" {
		return fmt.Errorf("backfill: -from and -to are required")
	}
	if body.MaxRunning < 1 || body.MaxRunning > replicated.MaxBackfillMaxRunning {
		return fmt.Errorf("backfill: -max-running %d: want 1 to %d", body.MaxRunning, replicated.MaxBackfillMaxRunning)
	}
	var res fsm.BackfillResult
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs/"+url.PathEscape(rest[0])+"/backfill", body, &res); err != nil || c.json {
		return err
	}
	printBackfill(stdout, res)
	return nil
}

func printBackfill(w io.Writer, res fsm.BackfillResult) {
	verb := "queued"
	if res.DryRun {
		verb = "would create"
	}
	fmt.Fprintf(w, "backfill %s [%s, %s): %d %s, %d already have a run", res.Job,
		res.From.UTC().Format(time.RFC3339), res.To.UTC().Format(time.RFC3339), len(res.Create), verb, len(res.Existing))
	if len(res.Queued) > 0 {
		fmt.Fprintf(w, ", %d queued by an earlier backfill", len(res.Queued))
	}
	if len(res.BeforeHorizon) > 0 {
		fmt.Fprintf(w, ", %d refused (at or before the retained horizon %s)", len(res.BeforeHorizon), res.Horizon.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "; max running %d\n", res.MaxRunning)
	for _, t := range res.Create {
		fmt.Fprintf(w, "  %-12s %s\n", strings.ReplaceAll(verb, " ", "-"), t.UTC().Format(time.RFC3339))
	}
	for _, e := range res.Existing {
		fmt.Fprintf(w, "  %-12s %s  run %s %s (%s)\n", "has-run", e.At.UTC().Format(time.RFC3339), e.Run, e.State, e.Trigger)
	}
	for _, t := range res.Queued {
		fmt.Fprintf(w, "  %-12s %s\n", "in-queue", t.UTC().Format(time.RFC3339))
	}
	for _, t := range res.BeforeHorizon {
		fmt.Fprintf(w, "  %-12s %s  its runs were dropped from the state up to %s: whether it ran cannot be told\n", "refused", t.UTC().Format(time.RFC3339), res.Horizon.UTC().Format(time.RFC3339))
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/scheduler/explain"
)

// runExplain answers "why did (or didn't) JOB run at TIME?":
// `fencecron explain JOB@TIME`, TIME in RFC 3339 or a wall time in the
// job's zone (2026-03-29T02:30).
func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, rest, err := clientFlags("explain", args, stdout, stderr, 1, "JOB@TIME   (TIME: RFC 3339, or a wall time in the job's zone such as 2026-03-29T02:30)")
	if err != nil {
		return err
	}
	i := strings.LastIndexByte(rest[0], '@')
	if i <= 0 || i == len(rest[0])-1 {
		return fmt.Errorf("explain %q: want JOB@TIME, such as nightly@2026-03-29T02:30", rest[0])
	}
	job, at := rest[0][:i], rest[0][i+1:]
	var ex explain.Explanation
	if err := c.do(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(job)+"/explain?at="+url.QueryEscape(at), nil, &ex); err != nil || c.json {
		return err
	}
	printExplanation(stdout, ex)
	return nil
}

func printExplanation(w io.Writer, ex explain.Explanation) {
	fmt.Fprintf(w, "%s at %s (%s)\n", ex.Job, ex.Asked, ex.Timezone)
	if ex.DST != "" {
		fmt.Fprintf(w, "daylight saving: %s\n", ex.DST)
	}
	loc, err := time.LoadLocation(ex.Timezone)
	if err != nil {
		loc = time.UTC
	}
	local := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.In(loc).Format("2006-01-02 15:04:05 MST") + " (" + t.UTC().Format(time.RFC3339) + ")"
	}
	for _, f := range ex.Fates {
		fmt.Fprintf(w, "%s: %s", local(f.At), f.Outcome)
		if f.Reason != "" {
			fmt.Fprintf(w, ": %s", f.Reason)
		}
		fmt.Fprintln(w)
		if f.Run == nil {
			continue
		}
		r := f.Run
		fmt.Fprintf(w, "  run %s: %s (trigger %s)\n", r.ID, r.State, orNone(r.Trigger))
		if len(r.Attempts) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ATTEMPT\tTOKEN\tWORKER\tSTATE\tSTARTED\tENDED\tEXIT\tSTORE\tNOTE\t")
		for _, a := range r.Attempts {
			exit := exitText(a)
			note := a.Error
			if a.Expired {
				note = strings.TrimPrefix(note+"; lease expired", "; ")
			}
			if a.NeverStarted {
				note += "; never started, not counted against retries"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", a.Number, a.Token, a.Worker, a.State, ts(a.StartedAt), ts(a.EndedAt), exit, a.StoreOutcome, note)
		}
		tw.Flush()
	}
	if !ex.FireTime && !ex.HasRun() {
		fmt.Fprintf(w, "not a fire time of %s; nearest: before %s, after %s\n", ex.Job, local(ex.Previous), local(ex.Next))
	}
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

// runRelease ends an attempt's lease now: `fencecron release -reason TEXT
// ATTEMPT`. The reason is required; the audit trail keeps it with who
// asked.
func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var reason string
	c, rest, err := clientFlags("release", args, stdout, stderr, 1, "-reason TEXT ATTEMPT", func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", "", "why the attempt's lease is ended now (required; kept in the audit trail with who asked)")
	})
	if err != nil {
		return err
	}
	if strings.TrimSpace(reason) == "" {
		fmt.Fprintln(stderr, "usage: fencecron release -reason TEXT ATTEMPT (the attempt id as `fencecron runs` shows it, e.g. backup@20260101T020000Z.1)")
		return fmt.Errorf("release: -reason is required: it goes into the audit trail")
	}
	attempt := rest[0]
	var rel scheduler.Released
	path := "/api/v1/attempts/" + url.PathEscape(attempt) + "/release"
	if err := c.do(ctx, http.MethodPost, path, map[string]string{"reason": reason}, &rel); err != nil || c.json {
		return err
	}
	run := rel.Run
	if rel.Again {
		fmt.Fprintf(stdout, "%s was released before: run %s is %s\n", attempt, run.ID, run.State)
	} else {
		fmt.Fprintf(stdout, "released %s: run %s is %s\n", attempt, run.ID, run.State)
	}
	if next, ok := run.Latest(); ok && next.ID != attempt {
		fmt.Fprintf(stdout, "next attempt %s to %s with token %s\n", next.ID, next.Worker, next.Token)
	} else if run.State == jobs.Pending {
		fmt.Fprintln(stdout, "its retry is granted with a newer token (see fencecron runs "+run.Job+")")
	}
	switch f := rel.Floor; {
	case f.Job == "":
		// A leader of an earlier version: it raises no floor.
	case f.Raised:
		fmt.Fprintf(stdout, "store floor of job %s raised to %s: the store refuses the released token, and every older one of the job, on every key\n", f.Job, f.Token)
	default:
		fmt.Fprintf(stderr, "fencecron: the lease is released, but the store floor of job %s was NOT raised to %s: %s\n", f.Job, f.Token, f.Error)
		fmt.Fprintln(stderr, "fencecron: until it is, the released token can still write the keys of its scope that no newer token has touched; run this release again to raise it")
		return fmt.Errorf("release %s: store floor not raised", attempt)
	}
	return nil
}

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
	var run jobs.Run
	path := "/api/v1/attempts/" + url.PathEscape(attempt) + "/release"
	if err := c.do(ctx, http.MethodPost, path, map[string]string{"reason": reason}, &run); err != nil || c.json {
		return err
	}
	fmt.Fprintf(stdout, "released %s: run %s is %s\n", attempt, run.ID, run.State)
	if next, ok := run.Latest(); ok && next.ID != attempt {
		fmt.Fprintf(stdout, "next attempt %s to %s with token %s\n", next.ID, next.Worker, next.Token)
	} else if run.State == jobs.Pending {
		fmt.Fprintln(stdout, "its retry is granted with a newer token (see fencecron runs "+run.Job+")")
	}
	return nil
}

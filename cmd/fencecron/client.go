package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// client talks to one node's HTTP API.
type client struct {
	base  string
	token string
	// namespace, if set, is sent with every request about jobs and runs
	// (namespacedPath): job names are read in it, lists filtered by it.
	namespace string
	json      bool
	out       io.Writer
	errOut    io.Writer
	http      *http.Client
}

// clientFlags parses the flags every client command takes, and those more
// adds; it returns the positional arguments.
func clientFlags(name string, args []string, stdout, stderr io.Writer, nargs int, argUsage string, more ...func(*flag.FlagSet)) (*client, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, m := range more {
		m(fs)
	}
	addr := fs.String("addr", defaultAddr(), "address of any node's HTTP API (or FENCECRON_ADDR)")
	asJSON := fs.Bool("json", false, "print the API's JSON answer")
	token := fs.String("token", os.Getenv("FENCECRON_API_TOKEN"), "the API token (api.token) that trigger, pause, resume and apply need (or FENCECRON_API_TOKEN)")
	namespace := fs.String("namespace", os.Getenv("FENCECRON_NAMESPACE"), "the namespace job names are read in, and lists of jobs filtered by (or FENCECRON_NAMESPACE; default: jobs are named NS:NAME, all listed)")
	tf := addTLSFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: fencecron %s [-addr HOST:PORT|https://HOST:PORT] [-ca FILE] [-insecure] [-token TOKEN] [-namespace NS] [-json] %s\n", name, argUsage)
		fs.PrintDefaults()
	}
	// The argument may come before the flags too (trigger JOB -addr X),
	// as it may for runs.
	if len(args) > 1 && !strings.HasPrefix(args[0], "-") && strings.HasPrefix(args[1], "-") {
		args = append(slices.Clone(args[1:]), args[0])
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if fs.NArg() != nargs && !(nargs < 0 && fs.NArg() <= -nargs) {
		fs.Usage()
		return nil, nil, flag.ErrHelp
	}
	if *namespace != "" && !jobs.ValidNamespace(*namespace) {
		return nil, nil, fmt.Errorf("-namespace %q: want a DNS label of 1-%d lowercase letters, digits and '-'", *namespace, jobs.MaxNamespaceLen)
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	tr, err := tf.transport(reach{flag: "-addr", env: "FENCECRON_ADDR"}, nil)
	if err != nil {
		return nil, nil, err
	}
	if *token != "" {
		tf.warnInsecure(stderr, base, "the API token")
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: tr}
	return &client{base: strings.TrimRight(base, "/"), token: *token, namespace: *namespace, json: *asJSON, out: stdout, errOut: stderr, http: hc}, fs.Args(), nil
}

// do sends a request and decodes a JSON answer into v, or with -json
// writes the answer as it came; a non-2xx answer becomes an error
// carrying the API's message.
func (c *client) do(ctx context.Context, method, path string, body any, v any) error {
	b, err := c.answer(ctx, method, path, body)
	if err != nil {
		return err
	}
	if c.json {
		c.out.Write(b)
		return nil
	}
	if v != nil {
		return json.Unmarshal(b, v)
	}
	return nil
}

// call is do for a request whose answer is not what the command prints
// (a command that makes several): it decodes the answer into v whatever
// -json says.
func (c *client) call(ctx context.Context, method, path string, body any, v any) error {
	b, err := c.answer(ctx, method, path, body)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// withHeader is a request body (JSON already) sent with a header.
type withHeader struct {
	io.Reader
	name, value string
}

// Close closes the body if it closes, as the transport closes a body it
// stops reading.
func (h withHeader) Close() error {
	if c, ok := h.Reader.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// answer sends a request and returns the body of its 2xx answer.
func (c *client) answer(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if r, ok := body.(io.Reader); ok {
		rd = r // JSON already, streamed
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	if c.namespace != "" && namespacedPath(path) {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "namespace=" + url.QueryEscape(c.namespace)
	}
	send := func(withToken bool) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if h, ok := body.(withHeader); ok {
			req.Header.Set(h.name, h.value)
		}
		// Only changes, and the export of the whole job set with the
		// jobs' secrets, need the API token; other reads (and the store,
		// which has its own credentials) see it only when the node asks
		// for it (401 or 403: a node with ACLs on, where reads need a
		// token too).
		if c.token != "" && (withToken || method != http.MethodGet || strings.HasPrefix(path, jobSetPath)) {
			req.Header.Set("Authorization", "Bearer "+c.token)
			if strings.HasPrefix(c.base, "http://") && !isLoopbackURL(c.base) {
				fmt.Fprintf(c.errOut, "fencecron: warning: sending the API token to %s in the clear: anyone on the path can read it; give the node api.tls and use https://\n", c.base)
			}
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, reachErr(err)
		}
		return resp, nil
	}
	resp, err := send(false)
	if err != nil {
		return nil, err
	}
	if rd == nil && c.token != "" && method == http.MethodGet && !strings.HasPrefix(path, jobSetPath) &&
		(resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		resp.Body.Close()
		if resp, err = send(true); err != nil {
			return nil, err
		}
	}
	b, err := wire.ReadAnswer(resp)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return b, nil
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, err := clientFlags("status", args, stdout, stderr, 0, "")
	if err != nil {
		return err
	}
	var st wire.Status
	if err := c.do(ctx, http.MethodGet, "/api/v1/status", nil, &st); err != nil || c.json {
		return err
	}
	fmt.Fprintf(stdout, "node %s (%s); leader %s; epoch %d\n", st.Node, st.RaftState, orNone(st.Leader), st.Epoch)
	if st.Leader == "" && st.NoLeader != "" {
		fmt.Fprintf(stdout, "no leader: %s\n", st.NoLeader)
	}
	if st.RaftState == "Worker" {
		// A worker applies no log: its empty copy is not the cluster's.
		leaderHTTP := ""
		for _, m := range st.Members {
			if m.Name == st.Leader {
				leaderHTTP = m.Meta.HTTPAddr
			}
		}
		fmt.Fprintf(stdout, "this node is a worker: it holds no replicated state; ask a server (the leader: %s) for the job set and runs\n", orNone(leaderHTTP))
	} else {
		fmt.Fprintf(stdout, "job set %s: %d jobs from %s at %s\n", orNone(st.Jobs.Hash), st.Jobs.Count, orNone(st.Jobs.Source), ts(st.Jobs.AppliedAt))
	}
	if st.Drifted {
		fmt.Fprintf(stdout, "this node's config (%s) differs from the applied job set\n", st.ConfigHash)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSTATE\tROLE\tHTTP\tCONFIG\t")
	for _, m := range st.Members {
		cfg := m.Meta.ConfigHash
		if m.Drifted {
			cfg += " (drifted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", m.Name, m.State, m.Meta.Role, m.Meta.HTTPAddr, cfg)
	}
	return tw.Flush()
}

func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, _, err := clientFlags("jobs", args, stdout, stderr, 0, "")
	if err != nil {
		return err
	}
	if c.json {
		return c.do(ctx, http.MethodGet, "/api/v1/jobs", nil, nil) // the first page, as the API answers it
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSCHEDULE\tZONE\tNEXT\tLAST RUN\tPAUSED\t")
	// Follow the pages to the end; a server that keeps answering with a
	// next page past the set's size is not followed for ever.
	var out wire.JobList
	for page, cursor := 0, ""; page == 0 || (cursor != "" && page <= out.Total/jobsPage+1); page++ {
		out = wire.JobList{}
		path := "/api/v1/jobs?limit=" + strconv.Itoa(jobsPage)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
			return err
		}
		printJobs(tw, out.Jobs)
		cursor = out.Next
	}
	return tw.Flush()
}

// namespacedPath reports whether the API reads a namespace parameter on
// path: a job's routes, the list of jobs, runs, events and skips.
func namespacedPath(path string) bool {
	p, _, _ := strings.Cut(path, "?")
	return p == "/api/v1/jobs" || strings.HasPrefix(p, "/api/v1/jobs/") ||
		p == "/api/v1/runs" || p == "/api/v1/events" || p == "/api/v1/skips"
}

// jobSetPath is the export of the whole job set, which needs the API
// token.
const jobSetPath = "/api/v1/jobset"

// jobsPage is how many jobs `fencecron jobs` asks for at a time.
const jobsPage = 1000

func printJobs(tw io.Writer, list []wire.Job) {
	for _, j := range list {
		last := ""
		if j.LastRun != nil {
			last = fmt.Sprintf("%s %s", j.LastRun.ScheduledAt.UTC().Format(time.RFC3339), j.LastRun.State)
		}
		when := strings.Join(j.Schedules, " | ")
		if when == "" && len(j.After) > 0 {
			when = "after " + strings.Join(j.After, ", ")
		}
		next := inZone(j.NextFire, j.Timezone)
		if j.Paused {
			next = "- (paused)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t\n", j.Name, when, j.Timezone, next, last, j.Paused)
	}
}

// runRuns lists runs, newest first: `fencecron runs [JOB] [-since 24h]
// [-until TIME] [-state failed,lost] [-limit N]`. JOB may come before the
// flags. It follows the API's pages until it has limit runs.
func runRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		args = append(slices.Clone(args[1:]), args[0])
	}
	var since, until, state string
	var limit int
	c, rest, err := clientFlags("runs", args, stdout, stderr, -1, "[JOB]", func(fs *flag.FlagSet) {
		fs.StringVar(&since, "since", "", "only runs scheduled since: an RFC 3339 time, or a duration such as 24h or 7d before now")
		fs.StringVar(&until, "until", "", "only runs scheduled before this RFC 3339 time")
		fs.StringVar(&state, "state", "", "only runs in these states, comma-separated (e.g. failed,lost)")
		fs.IntVar(&limit, "limit", 50, "at most this many runs (the newest)")
	})
	if err != nil {
		return err
	}
	if limit < 1 {
		return fmt.Errorf("-limit %d: want at least 1", limit)
	}
	q := url.Values{}
	if len(rest) == 1 {
		q.Set("job", rest[0])
	}
	for k, v := range map[string]string{"since": since, "until": until, "state": state} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var runs []jobs.Run
	for len(runs) < limit {
		q.Set("limit", strconv.Itoa(min(limit-len(runs), maxRunsPage)))
		var page wire.RunList
		if err := c.do(ctx, http.MethodGet, "/api/v1/runs?"+q.Encode(), nil, &page); err != nil || c.json {
			return err // -json prints the first page as the API answered it
		}
		runs = append(runs, page.Runs...)
		if page.Next == "" {
			break
		}
		q.Set("cursor", page.Next)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSCHEDULED\tSTATE\tATTEMPT\tTOKEN\tWORKER\tDURATION\tEXIT\tSTORE\tNOTE\t")
	for _, r := range runs {
		if len(r.Attempts) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t\t\t\t\t\t\t%s\t\n", r.ID, ts(r.ScheduledAt), r.State, r.Reason)
		}
		for _, a := range r.Attempts {
			exit := exitText(a)
			dur := jobs.ShowDuration(a.Duration())
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.ID, ts(r.ScheduledAt), a.State, a.Number, a.Token, a.Worker, dur, exit, a.StoreOutcome, a.Error)
		}
	}
	return tw.Flush()
}

// exitText is how an attempt ended, in the EXIT column: a process's exit
// code, or an HTTP job's response status.
func exitText(a jobs.Attempt) string {
	switch {
	case a.ExitCode != nil:
		return strconv.Itoa(*a.ExitCode)
	case a.HTTPStatus != 0:
		return "HTTP " + strconv.Itoa(a.HTTPStatus)
	}
	return ""
}

// maxRunsPage is the most runs the CLI asks for in one page.
const maxRunsPage = 1000

func runJobAction(action string) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		var force bool
		usage, more := "JOB", []func(*flag.FlagSet){}
		if action == "trigger" {
			usage = "[-force] JOB"
			more = append(more, func(fs *flag.FlagSet) {
				fs.BoolVar(&force, "force", false, "run it even if a run of it is still open and its overlap policy (forbid, replace) says otherwise; recorded in the audit trail")
			})
		}
		c, rest, err := clientFlags(action, args, stdout, stderr, 1, usage, more...)
		if err != nil {
			return err
		}
		var run jobs.Run
		var v any
		path := "/api/v1/jobs/" + url.PathEscape(rest[0]) + "/" + action
		if action == "trigger" {
			v = &run
			if force {
				path += "?force=true"
			}
		}
		if err := c.do(ctx, http.MethodPost, path, nil, v); err != nil || c.json {
			return err
		}
		switch action {
		case "trigger":
			if a, ok := run.Latest(); ok {
				fmt.Fprintf(stdout, "run %s: attempt %d to %s with token %s\n", run.ID, a.Number, a.Worker, a.Token)
			} else {
				fmt.Fprintf(stdout, "run %s: %s (%s)\n", run.ID, run.State, run.Reason)
			}
		case "pause":
			fmt.Fprintf(stdout, "job %s paused\n", rest[0])
		case "resume":
			fmt.Fprintf(stdout, "job %s resumed\n", rest[0])
		}
		return nil
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// inZone shows t in the IANA zone tz (a job's), with its offset.
func inZone(t time.Time, tz string) string {
	if t.IsZero() {
		return "-"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "" {
		return ts(t)
	}
	return t.In(loc).Format(time.RFC3339)
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

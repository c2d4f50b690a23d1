package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

func runLateness(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := benchFlags("lateness", stderr)
	rates := fs.String("rates", "10,100", "fires per second to measure, comma separated")
	duration := fs.Duration("duration", 30*time.Second, "measuring window per rate")
	warmup := fs.Duration("warmup", 5*time.Second, "time to let each cluster settle before measuring")
	bare := fs.Duration("bare", 10*time.Second, "before each rate's clusters, start the same processes from the harness alone for this long, as the machine's reference (under 1s: not)")
	bin, dir, cleanup, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	defer cleanup()
	bins, labels := c.binaries(bin)

	var (
		results []rateResult
		floors  []bareResult
	)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "fires/s\truns started\tlateness p50\tp99\tmax\tsucceeded runs/s\tfire times succeeded\traft entries/run\t"
	if len(bins) > 1 {
		header = "binary\t" + header
	}
	fmt.Fprintln(tw, header)
	for _, field := range strings.Split(*rates, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || rate < 1 {
			return fmt.Errorf("-rates: bad rate %q", field)
		}
		if *bare >= time.Second {
			f, err := bareStarts(ctx, rate, *bare)
			if err != nil {
				return fmt.Errorf("bare starts, %d fires/s: %w", rate, err)
			}
			floors = append(floors, f)
		}
		for i, b := range bins {
			r, err := measureRate(ctx, b, filepath.Join(dir, fmt.Sprintf("rate-%d-%d", rate, i)), rate, *warmup, *duration, stderr)
			if err != nil {
				return fmt.Errorf("%s, %d fires/s: %w", b, rate, err)
			}
			r.rate, r.label = rate, labels[i]
			results = append(results, r)
			s := summarize(r.lateness)
			if len(bins) > 1 {
				fmt.Fprintf(tw, "%s\t", labels[i])
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%.1f\t%.1f%%\t%s\t\n", rate, s.N, ms(s.P50), ms(s.P99), ms(s.Max),
				float64(r.succeeded)/float64(r.due/rate), 100*float64(r.succeeded)/float64(r.due), r.entriesPerRun())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header = "fires/s\tanonymous RSS of the nodes: start\tmax\tend\tCPU per run: nodes\tjobs\telections\t"
	if len(bins) > 1 {
		header = "binary\t" + header
	}
	fmt.Fprintln(tw, header)
	for _, r := range results {
		if len(bins) > 1 {
			fmt.Fprintf(tw, "%s\t", r.label)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.rate, mib(r.rssFirst), mib(r.rssMax), mib(r.rssLast),
			r.perRun(r.nodesCPU), r.perRun(r.jobsCPU), r.elections)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "three servers and a store node on loopback; each job runs /bin/true every second; lateness = process start - scheduled time;")
	fmt.Fprintf(stdout, "succeeded = runs due in the window that ended succeeded within %s after it; raft entries/run = the leader's last log index over the window / the runs granted in it;\n", settle)
	fmt.Fprintln(stdout, "RSS: RssAnon (the nodes' own memory, without the bolt files they map) summed over the four nodes, read every 10 s of the window; CPU: user+system time over the window of the node processes, and of the jobs they reaped, per run granted; elections: leaders elected in the window (fencecron_cluster_elections_total)")
	fmt.Fprintln(stdout)
	if len(floors) > 0 {
		if err := printBare(stdout, floors); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	return printTrace(stdout, results, len(bins) > 1)
}

// The stages of a run's trace, in the order they happen. Each is a time
// some component recorded, taken relative to the run's scheduled time:
//
//	fired      the leader's clock when it proposed the grant (Attempt.GrantedAt)
//	granted    the grant's entry committed and applied on the leader: when
//	           the "granted" audit event reached this harness over the
//	           leader's event stream (a little after the apply)
//	accepted   the worker received the dispatch (Attempt.AcceptedAt; log
//	           version 3 binaries only)
//	started    the process's exec succeeded, after the worker established
//	           at the store and had its lease confirmed (Attempt.StartedAt;
//	           builds before commit bcd8d24 took the time before the fork)
//	ended      the process exited (Attempt.EndedAt)
//	completed  the completion's entry committed and applied on the leader
//	           (the "completed" event reached this harness)
//
// The nodes and the harness share one host, so one clock.
var stages = []string{"fired", "granted", "accepted", "started", "ended", "completed"}

// runTrace is one run's stage times, relative to its scheduled time; a
// stage nobody recorded is absent.
type runTrace map[string]time.Duration

func printTrace(w io.Writer, results []rateResult, labelled bool) error {
	fmt.Fprintln(w, "where the time goes: each stage's time after the scheduled time (at), and since the stage before it (step), over the runs that recorded both;")
	fmt.Fprintln(w, "a run granted ahead of its fire time has negative times up to accepted, and its started step includes the wait for the fire time")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "fires/s\tstage\truns\tat p50\tat p99\tstep p50\tstep p99\t"
	if labelled {
		header = "binary\t" + header
	}
	fmt.Fprintln(tw, header)
	for _, r := range results {
		prev := ""
		for _, st := range stages {
			var at, step []time.Duration
			for _, tr := range r.traces {
				d, ok := tr[st]
				if !ok {
					continue
				}
				at = append(at, d)
				if p, ok := tr[prev]; ok {
					step = append(step, d-p)
				}
			}
			if len(at) == 0 {
				continue
			}
			a, s := summarize(at), summarize(step)
			if labelled {
				fmt.Fprintf(tw, "%s\t", r.label)
			}
			stepP50, stepP99 := "-", "-"
			if s.N > 0 {
				stepP50, stepP99 = ms(s.P50), ms(s.P99)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t\n", r.rate, st, a.N, ms(a.P50), ms(a.P99), stepP50, stepP99)
			prev = st
		}
	}
	return tw.Flush()
}

type rateResult struct {
	rate     int
	label    string
	lateness []time.Duration
	traces   []runTrace
	// due is how many fire times the window held, granted how many of
	// them were granted (the rest were skipped), succeeded how many ended
	// succeeded within the settle time after the window.
	due, granted, succeeded int
	// entries is how far the leader's Raft log grew over the window,
	// elections how many leaders were elected in it.
	entries, elections uint64
	// The nodes' own resident memory (RssAnon), summed over them, at the window's
	// start, at its end and the most seen in between (read every 10 s).
	rssFirst, rssLast, rssMax int64
	// The CPU time the nodes used over the window, and their jobs'.
	nodesCPU, jobsCPU time.Duration
}

// perRun is d spread over the runs granted.
func (r rateResult) perRun(d time.Duration) string { return msEach(d, r.granted) }

// msEach is d spread over n, in milliseconds; "-" for none.
func msEach(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)/float64(n))
}

// nodeUsage is what a cluster's node processes have used so far, summed.
type nodeUsage struct {
	rss           int64
	own, children time.Duration
}

// clusterUsage sums every running node's resident memory and CPU time;
// a node's children are the jobs it ran and reaped.
func clusterUsage(cl *localcluster.Cluster) (nodeUsage, error) {
	var u nodeUsage
	for _, n := range cl.Nodes {
		if !n.Running() {
			continue
		}
		rss, err := rssAnon(n.Pid())
		if err != nil {
			return u, err
		}
		own, children, err := cpuTimes(n.Pid())
		if err != nil {
			return u, err
		}
		u.rss += rss
		u.own += own
		u.children += children
	}
	return u, nil
}

func (r rateResult) entriesPerRun() string {
	if r.granted == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(r.entries)/float64(r.granted))
}

// measureRate runs `rate` jobs that each fire every second and, once the
// window's runs had time to finish, reads every run due in the window: an
// attempt's start time is when the worker started the process. It follows
// the leader's event stream meanwhile, for when each grant and completion
// was applied, and reads the leader's last Raft log index at both ends of
// the window.
func measureRate(ctx context.Context, bin, dir string, rate int, warmup, window time.Duration, stderr io.Writer) (rateResult, error) {
	cl, err := startRateCluster(bin, dir, rate, warmup, window)
	if err != nil {
		return rateResult{}, err
	}
	defer cl.Stop()
	watch, reader, err := leaderAndFollower(cl)
	if err != nil {
		return rateResult{}, err
	}
	select {
	case <-ctx.Done():
		return rateResult{}, ctx.Err()
	case <-time.After(warmup):
	}
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	seenAt := followEvents(streamCtx, watch.URL(), stderr)

	var res rateResult
	// The window is whole seconds of fire times: every job fires once in
	// each, so rate*seconds runs are due in it.
	start := time.Now().Truncate(time.Second).Add(time.Second)
	seconds := int(window / time.Second)
	end := start.Add(time.Duration(seconds) * time.Second)
	if !jobs.Sleep(ctx, jobs.SystemClock{}, time.Until(start)) {
		return res, ctx.Err()
	}
	if err := res.watchWindow(ctx, cl, watch, end, window); err != nil {
		return res, err
	}
	// Runs due in the window that end within settle after it still
	// count, and their completions reach the stream.
	if !jobs.Sleep(ctx, jobs.SystemClock{}, time.Until(end.Add(settle))) {
		return res, ctx.Err()
	}
	stopStream()
	events := seenAt()
	res.due = rate * seconds
	// Every run due in the window, read once at the end (from a follower,
	// which applies the same log, so the reads do not load the leader
	// measured), page by page: the state keeps only the newest runs,
	// and the history the rest.
	runs, err := runsBetween(reader, start, end)
	if err != nil {
		return res, err
	}
	for _, r := range runs {
		res.addRun(r, events)
	}
	return res, nil
}

// startRateCluster starts three servers and a store node running `rate`
// jobs that fire every second.
func startRateCluster(bin, dir string, rate int, warmup, window time.Duration) (*localcluster.Cluster, error) {
	// Each job keeps every run of the window in its history (100 by
	// default), so that all of them can be read back at the end.
	keep := int((warmup+window+settle)/time.Second) + 60
	var b strings.Builder
	for i := range rate {
		fmt.Fprintf(&b, "  - name: j%03d\n    schedule: \"* * * * * *\"\n    command: [\"/bin/true\"]\n    overlap: allow\n    timeout: 10s\n    history: {runs: %d}\n", i, keep)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return localcluster.Start(localcluster.Options{
		Binary: bin, Dir: dir, Servers: 3, StoreNode: true, Profile: "default", Jobs: b.String(),
	})
}

// leaderAndFollower returns the leader, to watch, and a follower to read
// the runs from: it applies the same log, so that the harness's reads
// (2,000 runs a second) do not load the leader it measures.
func leaderAndFollower(cl *localcluster.Cluster) (watch, reader *localcluster.Node, err error) {
	a, err := waitAgreed(cl, 60*time.Second)
	if err != nil {
		return nil, nil, err
	}
	watch = cl.Node(a.Leader)
	reader = watch
	for _, n := range cl.Servers() {
		if n.Name != a.Leader {
			reader = n
			break
		}
	}
	return watch, reader, nil
}

// watchWindow waits out the window, from its start to end, reading the
// leader's log and the nodes' usage at both ends and their memory every
// 10 s in between, to tell a flat line from a slope.
func (r *rateResult) watchWindow(ctx context.Context, cl *localcluster.Cluster, watch *localcluster.Node, end time.Time, window time.Duration) error {
	log0, err := readLog(watch.URL())
	if err != nil {
		return err
	}
	use0, err := clusterUsage(cl)
	if err != nil {
		return err
	}
	r.rssMax = use0.rss
	use := use0
	for range int(window/(10*time.Second)) + 1 {
		if !time.Now().Before(end) {
			break
		}
		if !jobs.Sleep(ctx, jobs.SystemClock{}, min(10*time.Second, time.Until(end))) {
			return ctx.Err()
		}
		if use, err = clusterUsage(cl); err != nil {
			return err
		}
		r.rssMax = max(r.rssMax, use.rss)
	}
	r.rssFirst, r.rssLast = use0.rss, use.rss
	r.nodesCPU, r.jobsCPU = use.own-use0.own, use.children-use0.children
	log1, err := readLog(watch.URL())
	if err != nil {
		return err
	}
	r.elections = log1.elections - log0.elections
	r.entries = log1.index - log0.index
	return nil
}

// addRun counts one run due in the window; only a run that ended has
// every stage of its trace to give.
func (r *rateResult) addRun(run jobs.Run, events map[string]seenEvent) {
	a, ok := run.Latest()
	if !ok {
		return // skipped: never granted
	}
	r.granted++
	if run.State == jobs.Succeeded {
		r.succeeded++
	}
	if !a.StartedAt.IsZero() {
		r.lateness = append(r.lateness, a.StartedAt.Sub(run.ScheduledAt))
	}
	if !run.State.Terminal() {
		return
	}
	tr := runTrace{}
	rel := func(stage string, t time.Time) {
		if !t.IsZero() {
			tr[stage] = t.Sub(run.ScheduledAt)
		}
	}
	rel("fired", a.GrantedAt)
	rel("granted", events[a.ID+"\x00"+jobs.EventGranted].at)
	rel("accepted", a.AcceptedAt)
	rel("started", a.StartedAt)
	rel("ended", a.EndedAt)
	rel("completed", events[a.ID+"\x00"+jobs.EventCompleted].at)
	r.traces = append(r.traces, tr)
}

// settle is how long after the window its runs may still finish and count.
const settle = 10 * time.Second

// runsBetween reads every run scheduled in [since, until) from n. The
// cluster is still running its jobs, perhaps more than it can, so a page
// may take a while.
func runsBetween(n *localcluster.Node, since, until time.Time) ([]jobs.Run, error) {
	q := url.Values{"since": {since.UTC().Format(time.RFC3339)}, "until": {until.UTC().Format(time.RFC3339)}, "limit": {"1000"}}
	var out []jobs.Run
	for range 10_000 {
		var page wire.RunList
		if err := n.GetJSONWithin("/api/v1/runs?"+q.Encode(), time.Minute, &page); err != nil {
			return out, fmt.Errorf("reading the runs due in the window: %w", err)
		}
		out = append(out, page.Runs...)
		if page.Next == "" {
			return out, nil
		}
		q.Set("cursor", page.Next)
	}
	return out, errors.New("reading the runs due in the window: too many pages")
}

// seenEvent is when this harness received an audit event of kind.
type seenEvent struct {
	kind string
	at   time.Time
}

// followEvents reads the node's event stream until ctx ends, and returns
// a function that waits for the reader to stop and gives, by attempt id
// and kind, when each grant and completion arrived. Only events that
// arrive after the call count (the stream starts with the backlog).
func followEvents(ctx context.Context, url string, stderr io.Writer) func() map[string]seenEvent {
	seen := map[string]seenEvent{}
	done := make(chan struct{})
	since := time.Now()
	go func() {
		defer close(done)
		req, err := http.NewRequestWithContext(ctx, "GET", url+"/api/v1/events", nil)
		if err != nil {
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(stderr, "fencebench: event stream:", err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			now := time.Now()
			var ev jobs.Event
			if json.Unmarshal([]byte(data), &ev) != nil || ev.Attempt == "" {
				continue
			}
			if ev.Kind != jobs.EventGranted && ev.Kind != jobs.EventCompleted {
				continue
			}
			if ev.Time.Before(since) {
				continue // the backlog, from before the window
			}
			key := ev.Attempt + "\x00" + ev.Kind
			if _, dup := seen[key]; !dup {
				seen[key] = seenEvent{kind: ev.Kind, at: now}
			}
		}
	}()
	return func() map[string]seenEvent {
		<-done
		return seen
	}
}

// logState is where a node's Raft log stood: its last index
// (fencecron_raft_last_log_index) and the leaders elected so far, from
// the replicated state (fencecron_cluster_elections_total).
type logState struct{ index, elections uint64 }

// readLog reads a logState from one scrape of a node's /metrics.
func readLog(url string) (logState, error) {
	var st logState
	want := map[string]*uint64{"fencecron_raft_last_log_index": &st.index, "fencecron_cluster_elections_total": &st.elections}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && len(want) > 0 {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if dst := want[name]; ok && dst != nil {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return st, fmt.Errorf("%s/metrics: %s: %w", url, name, err)
			}
			*dst = uint64(f)
			delete(want, name)
		}
	}
	for name := range want {
		return st, fmt.Errorf("%s/metrics has no %s", url, name)
	}
	return st, sc.Err()
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
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
	var k kinds
	fs.BoolVar(&k.http, "http", false, "also measure HTTP jobs, each sending a GET to a receiver this harness runs on loopback; lateness = arrival - Fencecron-Scheduled-At")
	fs.BoolVar(&k.process, "process", true, "measure process jobs (/bin/true); -process=false with -http measures HTTP jobs only")
	tracing := fs.String("tracing", "off", "off, on or both: the measured nodes export every run's trace (sample_ratio 1) over OTLP/HTTP to a sink this harness runs on loopback; both measures each cluster without, then with")
	// The flags are checked before the binary is built.
	if err := fs.Parse(args); err != nil {
		return err
	}
	modes, err := tracingModes(*tracing)
	if err != nil {
		return err
	}
	if !k.process && !k.http {
		return errors.New("-process=false without -http measures nothing")
	}
	bin, dir, cleanup, err := c.setup()
	if err != nil {
		return err
	}
	defer cleanup()
	bins, binLabels := c.binaries(bin)
	variants := latenessVariants(bins, binLabels, k, modes)
	// Rows name what they measured unless the run is the plain one.
	labelled := len(variants) > 1 || k.http || modes[0]

	var (
		results []rateResult
		floors  []bareResult
	)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "fires/s\truns started\tlateness p50\tp99\tmax\tsucceeded runs/s\tfire times succeeded\traft entries/run\tdelivered\t"
	if labelled {
		header = variantHeader + header
	}
	fmt.Fprintln(tw, header)
	for _, field := range strings.Split(*rates, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || rate < 1 {
			return fmt.Errorf("-rates: bad rate %q", field)
		}
		for _, requests := range []bool{false, true} {
			if *bare < time.Second || (requests && !k.http) || (!requests && !k.process) {
				continue
			}
			f, err := bareStarts(ctx, rate, *bare, requests)
			if err != nil {
				return fmt.Errorf("bare starts, %d fires/s: %w", rate, err)
			}
			floors = append(floors, f)
		}
		for i, v := range variants {
			r, err := measureVariant(ctx, v, filepath.Join(dir, fmt.Sprintf("rate-%d-%d", rate, i)), rate, *warmup, *duration, stderr)
			if err != nil {
				return fmt.Errorf("%s, %d fires/s: %w", v.label(), rate, err)
			}
			r.rate, r.variant = rate, v
			results = append(results, r)
			s := summarize(r.lateness)
			if labelled {
				fmt.Fprint(tw, v.cells())
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%.1f\t%.1f%%\t%s\t%.1f%%\t\n", rate, s.N, msFine(s.P50), msFine(s.P99), msFine(s.Max),
				float64(r.succeeded)/float64(r.due/rate), 100*float64(r.succeeded)/float64(r.due), r.entriesPerRun(), 100*float64(s.N)/float64(r.due))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header = "fires/s\tanonymous RSS of the nodes: start\tmax\tend\tCPU per run: nodes\tjobs\telections\t"
	if k.http {
		header += "receiver connections/run\t"
	}
	if modes[len(modes)-1] {
		header += "spans exported/run\t"
	}
	if labelled {
		header = variantHeader + header
	}
	fmt.Fprintln(tw, header)
	for _, r := range results {
		if labelled {
			fmt.Fprint(tw, r.variant.cells())
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t", r.rate, mib(r.rssEvery[0]), mib(slices.Max(r.rssEvery)), mib(r.rssLast()),
			r.perRun(r.nodesCPU), r.perRun(r.jobsCPU), r.elections)
		if k.http {
			fmt.Fprintf(tw, "%s\t", r.perDelivered(r.conns))
		}
		if modes[len(modes)-1] {
			fmt.Fprintf(tw, "%s\t", r.perGranted(r.spans))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		r.printRSS(stdout)
	}
	fmt.Fprintln(stdout, "three servers and a store node on loopback; each job fires every second: a process job runs /bin/true, lateness = process start - scheduled time;")
	if k.http {
		fmt.Fprintln(stdout, "an HTTP job sends a GET to a receiver of this harness on loopback, lateness = the request's arrival there - its Fencecron-Scheduled-At header;")
	}
	fmt.Fprintf(stdout, "succeeded = runs due in the window that ended succeeded within %s after it; raft entries/run = the leader's last log index over the window / the runs granted in it;\n", settle)
	fmt.Fprintln(stdout, "delivered = fire times of the window whose process started (or whose request reached the receiver), of those due;")
	fmt.Fprintln(stdout, "RSS: RssAnon (the nodes' own memory, without the bolt files they map) summed over the four nodes, read every 10 s of the window; CPU: user+system time over the window of the node processes, and of the jobs they reaped, per run granted; elections: leaders elected in the window (fencecron_cluster_elections_total)")
	if k.http {
		fmt.Fprintln(stdout, "receiver connections/run: connections the receiver accepted in the window, per request delivered (1.00: none kept open between runs)")
	}
	if modes[len(modes)-1] {
		fmt.Fprintln(stdout, "tracing on: every node exports every run's spans (sample_ratio 1) over OTLP/HTTP to a sink of this harness on loopback, which decodes and counts them; spans exported/run: spans it received in the window, per run granted")
	}
	fmt.Fprintln(stdout)
	if len(floors) > 0 {
		if err := printBare(stdout, floors); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	return printTrace(stdout, results, labelled)
}

// kinds are the jobs lateness measures.
type kinds struct{ process, http bool }

// tracingModes parses -tracing: whether each cluster is measured with
// tracing off, on, or both in turn (off first).
func tracingModes(v string) ([]bool, error) {
	switch v {
	case "off":
		return []bool{false}, nil
	case "on":
		return []bool{true}, nil
	case "both":
		return []bool{false, true}, nil
	}
	return nil, fmt.Errorf("-tracing: %q, want off, on or both", v)
}

// variant is one kind of cluster lateness measures at each rate.
type variant struct {
	bin, binLabel string
	// compared is whether the run measures more than one binary.
	compared bool
	http     bool
	tracing  bool
}

// variantHeader heads the columns that tell variants apart.
const variantHeader = "binary\tjobs\ttracing\t"

// cells are the variant's cells under variantHeader.
func (v variant) cells() string {
	return v.binLabel + "\t" + v.jobs() + "\t" + onOff(v.tracing) + "\t"
}

func (v variant) label() string {
	return fmt.Sprintf("%s, %s jobs, tracing %s", v.bin, v.jobs(), onOff(v.tracing))
}

func (v variant) jobs() string {
	if v.http {
		return "http"
	}
	return "process"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// latenessVariants lists what is measured at each rate, in order: for
// each binary (the -compare one first), each tracing mode (off first),
// process jobs, then HTTP jobs. Side by side, they meet the same machine
// as nearly as one run can make it.
func latenessVariants(bins, labels []string, k kinds, tracing []bool) []variant {
	var vs []variant
	for i, b := range bins {
		for _, tr := range tracing {
			if k.process {
				vs = append(vs, variant{bin: b, binLabel: labels[i], compared: len(bins) > 1, tracing: tr})
			}
			if k.http {
				vs = append(vs, variant{bin: b, binLabel: labels[i], compared: len(bins) > 1, http: true, tracing: tr})
			}
		}
	}
	return vs
}

// msFine is d in milliseconds, with a decimal below 10 ms, where HTTP
// jobs' lateness lies.
func msFine(d time.Duration) string {
	if d < 10*time.Millisecond && d > -10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return ms(d)
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
	fmt.Fprintln(w, "a run granted ahead of its fire time has negative times up to accepted, and its started step includes the wait for the fire time;")
	fmt.Fprintln(w, "started on <node>: the starts again, by the node that ran each (a follower's run waits for the leader to confirm its start, the leader's own does not; the leader is the node that led as the window began)")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "fires/s\tstage\truns\tat p50\tat p99\tstep p50\tstep p99\t"
	if labelled {
		header = variantHeader + header
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
				fmt.Fprint(tw, r.variant.cells())
			}
			stepP50, stepP99 := "-", "-"
			if s.N > 0 {
				stepP50, stepP99 = ms(s.P50), ms(s.P99)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t\n", r.rate, st, a.N, ms(a.P50), ms(a.P99), stepP50, stepP99)
			prev = st
		}
		// The starts again, by the node that ran each: a follower's run
		// waits for the leader to confirm its start, the leader's own does
		// not, so a confirmation that comes late shows as followers later
		// than the leader.
		for _, node := range slices.Sorted(maps.Keys(r.startedOn)) {
			a := summarize(r.startedOn[node])
			if labelled {
				fmt.Fprint(tw, r.variant.cells())
			}
			role := "on " + node
			if node == r.leader {
				role += " (leader)"
			}
			fmt.Fprintf(tw, "%d\tstarted %s\t%d\t%s\t%s\t-\t-\t\n", r.rate, role, a.N, ms(a.P50), ms(a.P99))
		}
	}
	return tw.Flush()
}

type rateResult struct {
	rate     int
	variant  variant
	lateness []time.Duration
	traces   []runTrace
	// startedOn is each run's start after its scheduled time, by the
	// node that ran it; leader is the node that led as the window began.
	startedOn map[string][]time.Duration
	leader    string
	// due is how many fire times the window held, granted how many of
	// them were granted (the rest were skipped), succeeded how many ended
	// succeeded within the settle time after the window.
	due, granted, succeeded int
	// entries is how far the leader's Raft log grew over the window,
	// elections how many leaders were elected in it.
	entries, elections uint64
	// rssEvery is the nodes' own resident memory (RssAnon), summed over
	// them, read every 10 s from the window's start and at its end.
	rssEvery []int64
	// The CPU time the nodes used over the window, and their jobs'.
	nodesCPU, jobsCPU time.Duration
	// conns is how many connections the HTTP receiver accepted over the
	// window, spans how many spans the tracing sink received in it.
	conns, spans int
}

// perDelivered is n per run delivered; "-" for none.
func (r rateResult) perDelivered(n int) string {
	if len(r.lateness) == 0 || !r.variant.http {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(len(r.lateness)))
}

// perGranted is n per run granted; "-" without tracing.
func (r rateResult) perGranted(n int) string {
	if r.granted == 0 || !r.variant.tracing {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(r.granted))
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

// measureVariant runs `rate` jobs of v's kind that each fire every
// second on v's binary and, once the window's runs had time to finish,
// reads every run due in the window: a process job's start time is when
// the worker started the process, an HTTP job's when its request reached
// the receiver. It follows the leader's event stream meanwhile, for when
// each grant and completion was applied, and reads the leader's last Raft
// log index at both ends of the window.
func measureVariant(ctx context.Context, v variant, dir string, rate int, warmup, window time.Duration, stderr io.Writer) (rateResult, error) {
	var (
		recv *receiver
		sink *traceSink
		err  error
	)
	if v.http {
		if recv, err = startReceiver(); err != nil {
			return rateResult{}, err
		}
		defer recv.close()
	}
	if v.tracing {
		if sink, err = startTraceSink(); err != nil {
			return rateResult{}, err
		}
		defer sink.close()
	}
	cl, err := startRateCluster(v.bin, dir, rate, warmup, window, recv, sink)
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

	res := rateResult{variant: v, leader: watch.Name}
	// The window is whole seconds of fire times: every job fires once in
	// each, so rate*seconds runs are due in it.
	start := time.Now().Truncate(time.Second).Add(time.Second)
	seconds := int(window / time.Second)
	end := start.Add(time.Duration(seconds) * time.Second)
	if !jobs.Sleep(ctx, jobs.SystemClock{}, time.Until(start)) {
		return res, ctx.Err()
	}
	conns0, spans0 := counts(recv, sink)
	if err := res.watchWindow(ctx, cl, watch, end, window); err != nil {
		return res, err
	}
	conns1, spans1 := counts(recv, sink)
	res.conns, res.spans = conns1-conns0, spans1-spans0
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
	if recv != nil {
		// An HTTP job's lateness is measured where its request arrives.
		res.lateness = recv.lateness(start, end)
		if _, bad := recv.counts(); bad > 0 {
			fmt.Fprintf(stderr, "fencebench: the receiver got %d requests without the fence headers\n", bad)
		}
	}
	if sink != nil {
		if _, bad := sink.counts(); bad > 0 {
			fmt.Fprintf(stderr, "fencebench: the trace sink refused %d exports\n", bad)
		}
	}
	return res, nil
}

// counts reads the receiver's connections and the sink's spans so far
// (0 for either that is nil).
func counts(recv *receiver, sink *traceSink) (conns, spans int) {
	if recv != nil {
		conns, _ = recv.counts()
	}
	if sink != nil {
		spans, _ = sink.counts()
	}
	return conns, spans
}

// startRateCluster starts three servers and a store node running `rate`
// jobs that fire every second: processes, or with recv requests to it;
// with sink, every node exports every run's trace to it.
func startRateCluster(bin, dir string, rate int, warmup, window time.Duration, recv *receiver, sink *traceSink) (*localcluster.Cluster, error) {
	var sections string
	var env map[string][]string
	if sink != nil {
		sections = fmt.Sprintf("telemetry: {otlp_endpoint: %q, protocol: http/protobuf, sample_ratio: 1}\n", sink.URL())
		// A batch that does not fill is exported every 5 s by default,
		// which a window of a few seconds can fall between; every second,
		// the spans of a low rate's window reach the sink within it. A
		// high rate fills its batches long before.
		env = map[string][]string{}
		for _, n := range []string{"n1", "n2", "n3", "store"} {
			env[n] = []string{"OTEL_BSP_SCHEDULE_DELAY=1000"}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return localcluster.Start(localcluster.Options{
		Binary: bin, Dir: dir, Servers: 3, StoreNode: true, Profile: "default", Jobs: rateJobs(rate, warmup, window, recv), Sections: sections, Env: env,
	})
}

// rateJobs is the jobs section of `rate` jobs that fire every second:
// /bin/true, or a GET to recv.
func rateJobs(rate int, warmup, window time.Duration, recv *receiver) string {
	// Each job keeps every run of the window in its history (100 by
	// default), so that all of them can be read back at the end.
	keep := int((warmup+window+settle)/time.Second) + 60
	var b strings.Builder
	for i := range rate {
		if recv != nil {
			fmt.Fprintf(&b, "  - name: h%03d\n    schedule: \"* * * * * *\"\n    http: {url: %q}\n", i, fmt.Sprintf("%s/h%03d", recv.URL(), i))
		} else {
			fmt.Fprintf(&b, "  - name: j%03d\n    schedule: \"* * * * * *\"\n    command: [\"/bin/true\"]\n", i)
		}
		fmt.Fprintf(&b, "    overlap: allow\n    timeout: 10s\n    history: {runs: %d}\n", keep)
	}
	return b.String()
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
	r.rssEvery = []int64{use0.rss}
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
		r.rssEvery = append(r.rssEvery, use.rss)
	}
	r.nodesCPU, r.jobsCPU = use.own-use0.own, use.children-use0.children
	log1, err := readLog(watch.URL())
	if err != nil {
		return err
	}
	r.elections = log1.elections - log0.elections
	r.entries = log1.index - log0.index
	return nil
}

// printRSS writes, for a window of a minute or more, the nodes' memory at
// each reading and the end's ratio to the reading 30 s in: a line that
// is flat once the state has filled in, or a slope.
func (r rateResult) printRSS(w io.Writer) {
	if len(r.rssEvery) < 7 {
		return
	}
	var b strings.Builder
	for _, v := range r.rssEvery {
		fmt.Fprintf(&b, " %d", v>>20)
	}
	fmt.Fprintf(w, "%d fires/s (%s): RssAnon every 10 s, MiB:%s; end / at 30 s: %.2f\n", r.rate, r.variant.label(), b.String(), float64(r.rssLast())/float64(r.rssEvery[3]))
}

// rssLast is the nodes' memory at the window's end.
func (r rateResult) rssLast() int64 { return r.rssEvery[len(r.rssEvery)-1] }

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
		late := a.StartedAt.Sub(run.ScheduledAt)
		r.lateness = append(r.lateness, late)
		if r.startedOn == nil {
			r.startedOn = map[string][]time.Duration{}
		}
		r.startedOn[a.Worker] = append(r.startedOn[a.Worker], late)
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

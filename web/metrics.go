package web

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

// GET /metrics writes the Prometheus text format (version 0.0.4) itself:
// the families are few, most are read from the replicated state at scrape
// time, and a dependency tree for that is not worth it.
//
// Two kinds of numbers:
//   - fencecron_cluster_*: the replicated state's lifetime counters and
//     gauges. Every node reports the same values (as of its last applied
//     entry), so aggregate them across nodes with max(), not sum().
//   - everything else is this node's own: its worker's leases, attempts
//     and lateness, and its Raft and gossip view.

// Buckets of the histograms, in seconds.
var (
	latenessBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	renewalBuckets  = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	holdBuckets     = []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// Metrics holds this node's own counters. It implements
// scheduler.Observer for the node's worker; it is safe for concurrent use.
type Metrics struct {
	mu            sync.Mutex
	acquisitions  map[string]uint64 // result -> count
	transitions   map[string]uint64 // suspect|lost -> count
	finished      map[[2]string]uint64
	cancelled     map[string]uint64 // reason -> count
	renewals      *histogram
	renewFailures uint64
	holds         *histogram
	lateness      map[string]*histogram // job -> histogram
	sseClients    atomic.Int64
	sseRefused    atomic.Int64
	// loginFailures counts refused logins by reason: wrong_token, or
	// locked_out (refused unchecked during a lockout).
	loginFailures map[string]uint64
}

// NewMetrics returns empty metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		acquisitions:  map[string]uint64{},
		transitions:   map[string]uint64{},
		finished:      map[[2]string]uint64{},
		cancelled:     map[string]uint64{},
		renewals:      newHistogram(renewalBuckets),
		holds:         newHistogram(holdBuckets),
		lateness:      map[string]*histogram{},
		loginFailures: map[string]uint64{},
	}
}

// loginFailed counts a refused login.
func (m *Metrics) loginFailed(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loginFailures[reason]++
}

var _ scheduler.Observer = (*Metrics)(nil)

// AttemptStarted implements scheduler.Observer: the lease is held and the
// process starts; lateness is its start minus the scheduled time.
func (m *Metrics) AttemptStarted(job string, scheduled, started time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acquisitions["held"]++
	h := m.lateness[job]
	if h == nil {
		h = newHistogram(latenessBuckets)
		m.lateness[job] = h
	}
	h.observe(max(started.Sub(scheduled), 0).Seconds())
}

// AttemptFinished implements scheduler.Observer.
func (m *Metrics) AttemptFinished(job string, c scheduler.Completion) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finished[[2]string{job, string(c.State)}]++
	if c.StartedAt.IsZero() {
		// Never held: fenced at establish, or the lease never confirmed.
		m.acquisitions[string(c.State)]++
		return
	}
	m.holds.observe(max(c.EndedAt.Sub(c.StartedAt), 0).Seconds())
	switch c.State {
	case jobs.Cancelled, jobs.Lost, jobs.TimedOut:
		m.cancelled[string(c.State)]++
	}
}

// LeaseRenewed implements scheduler.Observer.
func (m *Metrics) LeaseRenewed(latency time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.renewals.observe(latency.Seconds())
	if err != nil {
		m.renewFailures++
	}
}

// LeaseTransition implements scheduler.Observer.
func (m *Metrics) LeaseTransition(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.transitions[kind]++
}

// histogram is a cumulative Prometheus histogram.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

func (h *histogram) clone() *histogram {
	c := *h
	c.counts = slices.Clone(h.counts)
	return &c
}

// expo writes families in the text format.
type expo struct {
	w    io.Writer
	seen map[string]bool
}

func (e *expo) family(name, typ, help string) {
	if e.seen[name] {
		panic("metrics: family " + name + " written twice")
	}
	e.seen[name] = true
	fmt.Fprintf(e.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (e *expo) sample(name string, labels []string, v float64) {
	fmt.Fprintf(e.w, "%s%s %s\n", name, labelText(labels), formatValue(v))
}

// one writes a family with a single unlabelled sample.
func (e *expo) one(name, typ, help string, v float64) {
	e.family(name, typ, help)
	e.sample(name, nil, v)
}

func (e *expo) histogram(name string, labels []string, h *histogram) {
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		e.sample(name+"_bucket", append(slices.Clone(labels), "le", formatValue(b)), float64(cum))
	}
	cum += h.counts[len(h.bounds)]
	e.sample(name+"_bucket", append(slices.Clone(labels), "le", "+Inf"), float64(cum))
	e.sample(name+"_sum", labels, h.sum)
	e.sample(name+"_count", labels, float64(h.n))
}

// labelText renders name/value pairs as {a="x",b="y"}.
func labelText(kv []string) string {
	if len(kv) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// clusterCounters maps the replicated counters to metric names.
var clusterCounters = []struct{ key, name, help string }{
	{"grants", "fencecron_cluster_grants_total", "Attempts granted (fence tokens minted), retries and takeovers included."},
	{"expiries", "fencecron_cluster_lease_expiries_total", "Leases the leader took away because they were not renewed in time."},
	{"fenced", "fencecron_cluster_attempts_fenced_total", "Attempts that ended fenced: the store held a newer token."},
	{"stale_refused", "fencecron_cluster_stale_writes_refused_total", "Publishes the fenced store refused as stale_owner, as reported by workers."},
	{"elections", "fencecron_cluster_elections_total", "Leaders elected (each one starts an epoch)."},
	{"completions", "fencecron_cluster_completions_total", "Attempt completions applied."},
	{"skipped", "fencecron_cluster_runs_skipped_total", "Scheduled runs skipped by overlap or misfire policy."},
	{"suspect", "fencecron_cluster_lease_suspect_total", "SUSPECT lease transitions reported by workers."},
	{"lost", "fencecron_cluster_lease_lost_total", "LOST lease transitions reported by workers."},
}

var runStates = []jobs.State{jobs.Pending, jobs.Running, jobs.Succeeded, jobs.Failed, jobs.Fenced, jobs.TimedOut, jobs.Lost, jobs.Cancelled, jobs.Skipped}

func (s *Server) metrics() *Metrics {
	return s.Metrics
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.writeMetrics(w)
}

func (s *Server) writeMetrics(w io.Writer) {
	e := &expo{w: w, seen: map[string]bool{}}

	// The replicated state.
	counters := s.State.Counters()
	for _, c := range clusterCounters {
		e.one(c.name, "counter", c.help, float64(counters[c.key]))
	}
	byState := map[jobs.State]int{}
	for _, run := range s.State.Runs(scheduler.RunFilter{}) {
		byState[run.State]++
	}
	e.family("fencecron_cluster_runs", "gauge", "Runs kept in the replicated state, by state.")
	for _, st := range runStates {
		e.sample("fencecron_cluster_runs", []string{"state", string(st)}, float64(byState[st]))
	}
	epoch, _ := s.State.Epoch()
	e.one("fencecron_cluster_epoch", "gauge", "The current epoch: the Raft term of the last leader whose election was applied.", float64(epoch))
	specs, _, _, _ := s.State.JobSet()
	e.family("fencecron_cluster_job_paused", "gauge", "1 if the job is paused, 0 if it fires.")
	for _, spec := range specs {
		e.sample("fencecron_cluster_job_paused", []string{"job", spec.Name}, b2f(spec.Paused))
	}

	// Raft and gossip as this node sees them.
	leader, _ := s.Cluster.Leader()
	e.one("fencecron_raft_leader_known", "gauge", "1 if this node knows a leader.", b2f(leader != ""))
	e.family("fencecron_raft_state", "gauge", "This node's Raft state (1 for the current one).")
	state := s.Cluster.State()
	for _, st := range []string{"Leader", "Follower", "Candidate", "Shutdown", "none"} {
		e.sample("fencecron_raft_state", []string{"state", st}, b2f(strings.EqualFold(state, st)))
	}
	var stats map[string]string
	if st, ok := s.Cluster.(interface{ Stats() map[string]string }); ok {
		stats = st.Stats()
	}
	for _, f := range []struct{ key, name, help string }{
		{"term", "fencecron_raft_term", "This node's current Raft term."},
		{"last_log_index", "fencecron_raft_last_log_index", "Index of the last entry in this node's Raft log."},
		{"commit_index", "fencecron_raft_commit_index", "Index of the last committed entry this node knows of."},
		{"applied_index", "fencecron_raft_applied_index", "Index of the last entry applied to this node's state."},
		{"fsm_pending", "fencecron_raft_fsm_pending", "Committed entries waiting to be applied on this node."},
	} {
		if v, err := strconv.ParseFloat(stats[f.key], 64); err == nil {
			e.one(f.name, "gauge", f.help, v)
		}
	}
	if lc, ok := stats["last_contact"]; ok {
		v := -1.0 // never, or this node leads
		if d, err := time.ParseDuration(lc); err == nil {
			v = d.Seconds()
		} else if lc == "0" {
			v = 0
		}
		e.one("fencecron_raft_last_contact_seconds", "gauge", "Time since this follower last heard from the leader; 0 on the leader, -1 if never.", v)
	}
	if vs, err := s.Cluster.Voters(); err == nil {
		n := 0
		for _, v := range vs {
			if v.Voter {
				n++
			}
		}
		e.one("fencecron_raft_voters", "gauge", "Voters in the Raft configuration as this node knows it.", float64(n))
	}
	members := map[string]int{}
	for _, m := range s.Cluster.Members() {
		members[m.State]++
	}
	e.family("fencecron_gossip_members", "gauge", "Gossip members by state, as this node sees them.")
	for _, st := range []string{"alive", "suspect", "dead", "left"} {
		e.sample("fencecron_gossip_members", []string{"state", st}, float64(members[st]))
	}

	// This node's worker.
	m := s.metrics()
	m.mu.Lock()
	acq := maps2(m.acquisitions)
	trans := maps2(m.transitions)
	finished := map[[2]string]uint64{}
	for k, v := range m.finished {
		finished[k] = v
	}
	cancelled := maps2(m.cancelled)
	renewals, holds, renewFailures := m.renewals.clone(), m.holds.clone(), m.renewFailures
	lateness := map[string]*histogram{}
	for k, h := range m.lateness {
		lateness[k] = h.clone()
	}
	logins := maps2(m.loginFailures)
	m.mu.Unlock()

	e.family("fencecron_lease_acquisitions_total", "counter", "Attempts this worker took: result held (lease confirmed, process started) or the state it ended in without holding it (fenced at establish, lost).")
	for _, k := range sortedKeys(acq, "held") {
		e.sample("fencecron_lease_acquisitions_total", []string{"result", k}, float64(acq[k]))
	}
	e.family("fencecron_lease_hold_seconds", "histogram", "How long this worker held the leases of attempts whose process ran.")
	e.histogram("fencecron_lease_hold_seconds", nil, holds)
	e.family("fencecron_lease_renewal_seconds", "histogram", "Latency of this worker's lease renewal calls to the leader.")
	e.histogram("fencecron_lease_renewal_seconds", nil, renewals)
	e.one("fencecron_lease_renewal_failures_total", "counter", "Renewal calls of this worker that got no answer from a leader.", float64(renewFailures))
	e.family("fencecron_lease_transitions_total", "counter", "SUSPECT and LOST lease transitions this worker went through.")
	for _, k := range sortedKeys(trans, jobs.EventSuspect, jobs.EventLost) {
		e.sample("fencecron_lease_transitions_total", []string{"state", k}, float64(trans[k]))
	}
	e.family("fencecron_work_cancelled_total", "counter", "Running processes this worker stopped: cancelled (overlap replace, shutdown), lost lease, timed out.")
	for _, k := range sortedKeys(cancelled, string(jobs.Cancelled), string(jobs.Lost), string(jobs.TimedOut)) {
		e.sample("fencecron_work_cancelled_total", []string{"reason", k}, float64(cancelled[k]))
	}
	e.family("fencecron_attempts_finished_total", "counter", "Attempts this worker finished, by job and state.")
	keys := make([][2]string, 0, len(finished))
	for k := range finished {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	for _, k := range keys {
		e.sample("fencecron_attempts_finished_total", []string{"job", k[0], "state", k[1]}, float64(finished[k]))
	}
	e.family("fencecron_job_lateness_seconds", "histogram", "Process start on this worker minus the run's scheduled time, per job.")
	for _, job := range sortedKeys(lateness) {
		e.histogram("fencecron_job_lateness_seconds", []string{"job", job}, lateness[job])
	}
	e.one("fencecron_http_event_streams", "gauge", "Open server-sent event streams (dashboards watching this node).", float64(m.sseClients.Load()))
	e.one("fencecron_http_event_streams_refused_total", "counter", "Event streams refused because api.limits.max_event_streams were open.", float64(m.sseRefused.Load()))
	e.family("fencecron_login_failures_total", "counter", "Dashboard logins this node refused: reason wrong_token, or locked_out (the client address was locked out after failures; the token was not checked).")
	for _, k := range sortedKeys(logins, loginWrongToken, loginLockedOut) {
		e.sample("fencecron_login_failures_total", []string{"reason", k}, float64(logins[k]))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func maps2[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sortedKeys returns the keys of m, sorted, with always listed first in
// that order whether present or not.
func sortedKeys[V any](m map[string]V, always ...string) []string {
	out := slices.Clone(always)
	var rest []string
	for k := range m {
		if !slices.Contains(always, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

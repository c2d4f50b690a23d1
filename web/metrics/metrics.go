// Package metrics holds one node's own Prometheus figures: what its
// worker saw of its attempts and leases (it is the worker's
// worker.Observer), the decisions of the fenced store it serves, and the
// Go runtime and process collectors, on a registry of its own (no global
// state: two nodes in one process, or two tests, never share a family).
//
// The replicated state is not here: the web server registers a collector
// on the same registry that reads it at scrape time (web/metrics.go) and
// serves the registry at GET /metrics.
//
// Names follow fencecron_<thing>_<unit>; counters end in _total; no label
// is called job or instance (Prometheus keeps those for the scrape
// target), so per-job figures carry job_name.
package metrics

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/buildinfo"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// Buckets of the histograms, in seconds.
var (
	latenessBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	renewalBuckets  = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	holdBuckets     = []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// catchupBuckets: a catch-up run is seconds to hours late.
var catchupBuckets = []float64{2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600}

// Outcomes are the store's decisions in the order the Overview shows them.
var Outcomes = []fencedstore.Outcome{fencedstore.Applied, fencedstore.Established, fencedstore.StaleOwner, fencedstore.Conflict, fencedstore.Expired}

// Node is one node's metrics. It implements worker.Observer; every
// method is safe for concurrent use and returns at once.
type Node struct {
	reg *prometheus.Registry

	acquisitions  *prometheus.CounterVec // result
	holds         prometheus.Histogram
	renewals      prometheus.Histogram
	renewFailures prometheus.Counter
	transitions   *prometheus.CounterVec   // state
	cancelled     *prometheus.CounterVec   // reason
	finished      *prometheus.CounterVec   // job_name, state
	lateness      *prometheus.HistogramVec // job_name
	catchup       *prometheus.HistogramVec // job_name
	notesDropped  prometheus.Counter

	mu        sync.Mutex
	decisions map[fencedstore.Outcome]uint64
}

var _ worker.Observer = (*Node)(nil)

// New returns a node's metrics on a fresh registry that already holds the
// Go runtime and process collectors.
func New() *Node {
	reg := prometheus.NewRegistry()
	n := &Node{reg: reg, decisions: map[fencedstore.Outcome]uint64{}}
	n.acquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencecron_lease_acquisitions_total",
		Help: "Attempts this worker took: result held (lease confirmed, process started) or the state it ended in without holding it (fenced at establish, lost).",
	}, []string{"result"})
	n.holds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fencecron_lease_hold_seconds",
		Help:    "How long this worker held the leases of attempts whose process ran.",
		Buckets: holdBuckets,
	})
	n.renewals = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fencecron_lease_renewal_seconds",
		Help:    "Latency of this worker's lease renewal calls to the leader.",
		Buckets: renewalBuckets,
	})
	n.renewFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencecron_lease_renewal_failures_total",
		Help: "Renewal calls of this worker that got no answer from a leader.",
	})
	n.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencecron_lease_transitions_total",
		Help: "SUSPECT and LOST lease transitions this worker went through.",
	}, []string{"state"})
	n.cancelled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencecron_work_cancelled_total",
		Help: "Running processes this worker stopped: cancelled (overlap replace, shutdown), lost lease, timed out.",
	}, []string{"reason"})
	n.finished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencecron_attempts_finished_total",
		Help: "Attempts this worker finished, by job and state.",
	}, []string{"job_name", "state"})
	n.lateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fencecron_job_lateness_seconds",
		Help:    "Process start on this worker minus the run's scheduled time, per job, for runs granted on time (catch-up runs are in fencecron_job_catchup_lateness_seconds).",
		Buckets: latenessBuckets,
	}, []string{"job_name"})
	n.catchup = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fencecron_job_catchup_lateness_seconds",
		Help:    "Process start on this worker minus the run's scheduled time, per job, for catch-up runs: fire times the leader granted more than 2s late (after a restart, a leader change, a pause).",
		Buckets: catchupBuckets,
	}, []string{"job_name"})
	n.notesDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencecron_store_refusal_notes_dropped_total",
		Help: "Refusals of jobs' own publishes this node's store could not report to the leader because too many reports were waiting.",
	})
	// The label values that are always there, so a query finds a 0
	// rather than nothing.
	n.acquisitions.WithLabelValues("held")
	for _, st := range []string{jobs.EventSuspect, jobs.EventLost} {
		n.transitions.WithLabelValues(st)
	}
	for _, st := range []jobs.State{jobs.Cancelled, jobs.Lost, jobs.TimedOut} {
		n.cancelled.WithLabelValues(string(st))
	}
	// The build, as `fencecron version` prints it: a dashboard can tell
	// which nodes run which binary, and an alert a mix of log versions.
	bi := buildinfo.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencecron_build_info",
		Help: "Always 1; the labels name this node's build: version, commit, the replicated log's format it reads and writes (log_version), Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "commit": bi.Commit,
			"log_version": strconv.Itoa(bi.LogVersion), "goversion": bi.GoVersion},
	})
	build.Set(1)
	reg.MustRegister(
		build,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		n.acquisitions, n.holds, n.renewals, n.renewFailures, n.transitions,
		n.cancelled, n.finished, n.lateness, n.catchup, n.notesDropped,
		decisionCollector{n},
	)
	return n
}

// Registry is where the node's figures are, and where the web server
// registers its own and the replicated state's collector.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// AttemptStarted implements worker.Observer: the lease is held and the
// process started; lateness is its start minus the scheduled time.
func (n *Node) AttemptStarted(job string, scheduled, started time.Time) {
	n.acquisitions.WithLabelValues("held").Inc()
	n.lateness.WithLabelValues(job).Observe(max(started.Sub(scheduled), 0).Seconds())
}

// CatchupStarted implements worker.CatchupObserver: as AttemptStarted,
// with the lateness in its own histogram.
func (n *Node) CatchupStarted(job string, scheduled, started time.Time) {
	n.acquisitions.WithLabelValues("held").Inc()
	n.catchup.WithLabelValues(job).Observe(max(started.Sub(scheduled), 0).Seconds())
}

// AttemptFinished implements worker.Observer.
func (n *Node) AttemptFinished(job string, c replicated.Completion) {
	n.finished.WithLabelValues(job, string(c.State)).Inc()
	if c.StartedAt.IsZero() {
		// Never held: fenced at establish, or the lease never confirmed.
		n.acquisitions.WithLabelValues(string(c.State)).Inc()
		return
	}
	n.holds.Observe(max(c.EndedAt.Sub(c.StartedAt), 0).Seconds())
	switch c.State {
	case jobs.Cancelled, jobs.Lost, jobs.TimedOut:
		n.cancelled.WithLabelValues(string(c.State)).Inc()
	}
}

// LeaseRenewed implements worker.Observer.
func (n *Node) LeaseRenewed(latency time.Duration, err error) {
	n.renewals.Observe(latency.Seconds())
	if err != nil {
		n.renewFailures.Inc()
	}
}

// LeaseTransition implements worker.Observer.
func (n *Node) LeaseTransition(kind string) {
	n.transitions.WithLabelValues(kind).Inc()
}

// RefusalNoteDropped counts a refusal of a job's own publish that could
// not be queued for the leader.
func (n *Node) RefusalNoteDropped() { n.notesDropped.Inc() }

// StoreDecided counts one decision of the store this node serves.
func (n *Node) StoreDecided(o fencedstore.Outcome) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.decisions[o]++
}

// OutcomeCount is how many decisions of one outcome the store made.
type OutcomeCount struct {
	Outcome fencedstore.Outcome
	N       uint64
}

// StoreDecisions returns the decisions counted so far, every one of
// Outcomes first (zero or not), then any other, by name.
func (n *Node) StoreDecisions() []OutcomeCount {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]OutcomeCount, 0, len(n.decisions))
	for _, o := range Outcomes {
		out = append(out, OutcomeCount{o, n.decisions[o]})
	}
	var rest []OutcomeCount
	for o, c := range n.decisions {
		if !slices.Contains(Outcomes, o) {
			rest = append(rest, OutcomeCount{o, c})
		}
	}
	slices.SortFunc(rest, func(a, b OutcomeCount) int { return cmp.Compare(a.Outcome, b.Outcome) })
	return append(out, rest...)
}

var decisionsDesc = prometheus.NewDesc("fencecron_store_decisions_total",
	"Decisions of the fenced store this node serves, by outcome: applied, established, stale_owner, conflict, expired; whoever called (this node's worker, a job's own publish, another node).",
	[]string{"outcome"}, nil)

// decisionCollector exposes the store's decisions.
type decisionCollector struct{ n *Node }

func (c decisionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- decisionsDesc }

func (c decisionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, oc := range c.n.StoreDecisions() {
		ch <- prometheus.MustNewConstMetric(decisionsDesc, prometheus.CounterValue, float64(oc.N), string(oc.Outcome))
	}
}

// CountDecisions returns s with every decision of its Establish and
// Publish counted in n. Give it to everything on this node that writes to
// the store it serves (the worker and the HTTP handler), so each decision
// is counted once, whoever asked; a store another node serves counts its
// decisions there.
func (n *Node) CountDecisions(s fencedstore.Store) fencedstore.Store {
	return countingStore{Store: s, n: n}
}

type countingStore struct {
	fencedstore.Store
	n *Node
}

func (s countingStore) Establish(ctx context.Context, req fencedstore.EstablishRequest) (fencedstore.Result, error) {
	res, err := s.Store.Establish(ctx, req)
	s.count(res, err)
	return res, err
}

func (s countingStore) Publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	res, err := s.Store.Publish(ctx, req)
	s.count(res, err)
	return res, err
}

// count counts an answer that is a decision; failures (bad input, the
// backend unreachable) are not.
func (s countingStore) count(res fencedstore.Result, err error) {
	if (err == nil || fencedstore.IsDecision(err)) && res.Outcome != "" {
		s.n.StoreDecided(res.Outcome)
	}
}

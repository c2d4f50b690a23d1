package web

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/web/api"
	"github.com/fencecron/fencecron/web/auth"
)

// GET /metrics serves the registry of the node's metrics.Node in the
// Prometheus text format. Three kinds of figures are there:
//   - fencecron_cluster_*: the replicated state's lifetime counters and
//     gauges, read by stateCollector at scrape time. Every node reports the
//     same values (as of its last applied entry), so aggregate them across
//     nodes with max(), not sum().
//   - fencecron_raft_* and fencecron_gossip_*: this node's view of Raft and
//     gossip, read at scrape time too.
//   - everything else is this node's own: its worker's leases, attempts
//     and lateness, its store's decisions (package metrics), its HTTP
//     server's event streams (web/api) and refused logins (web/auth), and the Go
//     runtime and the process.

// clusterCounters maps the replicated counters to metric names.
var clusterCounters = []struct{ key, name, help string }{
	{"grants", "fencecron_cluster_grants_total", "Attempts granted (fence tokens minted), retries and takeovers included."},
	{"expiries", "fencecron_cluster_lease_expiries_total", "Leases the leader took away because they were not renewed in time."},
	{"fenced", "fencecron_cluster_attempts_fenced_total", "Attempts that ended fenced: the store held a newer token."},
	{"stale_refused", "fencecron_cluster_stale_writes_refused_total", "Publishes the fenced store refused as stale_owner, as reported by workers and by the nodes serving the store."},
	{"elections", "fencecron_cluster_elections_total", "Leaders elected (each one starts an epoch)."},
	{"completions", "fencecron_cluster_completions_total", "Attempt completions applied."},
	{"skipped", "fencecron_cluster_runs_skipped_total", "Scheduled runs skipped by overlap or misfire policy."},
	{"suspect", "fencecron_cluster_lease_suspect_total", "SUSPECT lease transitions reported by workers."},
	{"lost", "fencecron_cluster_lease_lost_total", "LOST lease transitions reported by workers."},
	{"notified", "fencecron_cluster_notifications_delivered_total", "Notifications (webhook, Slack, email) the leader delivered and recorded."},
	{"notify_failed", "fencecron_cluster_notifications_failed_total", "Notifications given up on after their tries, or dropped from a full queue."},
	{"releases", "fencecron_cluster_attempts_released_total", "Attempts whose lease an operator ended (fencecron release)."},
	{"group_full", "fencecron_cluster_group_full_total", "Fire times skipped because their concurrency group's queue was full (max_waiting)."},
}

// maxPausedSeries bounds the fencecron_cluster_job_paused series of one
// scrape.
const maxPausedSeries = 1000

// raftStates are the values of fencecron_raft_state's label.
var raftStates = []string{"Leader", "Follower", "Candidate", "Shutdown", "none"}

// gossipStates are the values of fencecron_gossip_members' label.
var gossipStates = []string{"alive", "suspect", "dead", "left"}

// Descriptions of what stateCollector reads at scrape time.
var (
	clusterCounterDescs = func() []*prometheus.Desc {
		out := make([]*prometheus.Desc, len(clusterCounters))
		for i, c := range clusterCounters {
			out[i] = prometheus.NewDesc(c.name, c.help, nil, nil)
		}
		return out
	}()
	runsDesc        = prometheus.NewDesc("fencecron_cluster_runs", "Runs kept in the replicated state, by state.", []string{"state"}, nil)
	epochDesc       = prometheus.NewDesc("fencecron_cluster_epoch", "The current epoch: the Raft term of the last leader whose election was applied (plus the epoch base of a cluster restored from a snapshot).", nil, nil)
	pausedDesc      = prometheus.NewDesc("fencecron_cluster_job_paused", "1 if the job is paused, 0 if it fires (in a set of more than 1000 jobs, the first 1000 paused jobs only).", []string{"job_name"}, nil)
	leaderKnownDesc = prometheus.NewDesc("fencecron_raft_leader_known", "1 if this node knows a leader.", nil, nil)
	raftStateDesc   = prometheus.NewDesc("fencecron_raft_state", "This node's Raft state (1 for the current one).", []string{"state"}, nil)
	termDesc        = prometheus.NewDesc("fencecron_raft_term", "This node's current Raft term.", nil, nil)
	lastIndexDesc   = prometheus.NewDesc("fencecron_raft_last_log_index", "Index of the last entry in this node's Raft log.", nil, nil)
	commitDesc      = prometheus.NewDesc("fencecron_raft_commit_index", "Index of the last committed entry this node knows of.", nil, nil)
	appliedDesc     = prometheus.NewDesc("fencecron_raft_applied_index", "Index of the last entry applied to this node's state.", nil, nil)
	pendingDesc     = prometheus.NewDesc("fencecron_raft_fsm_pending", "Committed entries waiting to be applied on this node.", nil, nil)
	contactDesc     = prometheus.NewDesc("fencecron_raft_last_contact_seconds", "Time since this follower last heard from the leader; 0 on the leader, -1 if never.", nil, nil)
	votersDesc      = prometheus.NewDesc("fencecron_raft_voters", "Voters in the Raft configuration as this node knows it.", nil, nil)
	membersDesc     = prometheus.NewDesc("fencecron_gossip_members", "Gossip members by state, as this node sees them.", []string{"state"}, nil)
	overloadedDesc  = prometheus.NewDesc("fencecron_cluster_overloaded", "1 while the leader sheds fire times because every worker a job may run on holds its node.max_attempts open attempts (until 30 s after the last), else 0.", nil, nil)
	overloadSince   = prometheus.NewDesc("fencecron_cluster_overloaded_since_timestamp_seconds", "When the current overload began (Unix time); 0 when the cluster is not overloaded.", nil, nil)
	shedDesc        = prometheus.NewDesc("fencecron_cluster_overload_skipped_total", "Fire times the leader skipped because no worker had room for them, since this node started (or restored a snapshot).", nil, nil)
)

// stateCollector reads the replicated state and this node's Raft and
// gossip view when Prometheus scrapes.
type stateCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range clusterCounterDescs {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{overloadedDesc, overloadSince, shedDesc, runsDesc, epochDesc, pausedDesc, leaderKnownDesc, raftStateDesc, termDesc, lastIndexDesc, commitDesc, appliedDesc, pendingDesc, contactDesc, votersDesc, membersDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	// The replicated state.
	counters := s.State.Counters()
	for i, cc := range clusterCounters {
		ch <- prometheus.MustNewConstMetric(clusterCounterDescs[i], prometheus.CounterValue, float64(counters[cc.key]))
	}
	o := s.State.Overload()
	active, since := o.Active(s.Clock.Now()), 0.0
	if active {
		since = float64(o.Since.UnixNano()) / 1e9
	}
	gauge(overloadedDesc, b2f(active))
	gauge(overloadSince, since)
	ch <- prometheus.MustNewConstMetric(shedDesc, prometheus.CounterValue, float64(o.Skipped))
	byState := map[jobs.State]int{}
	for _, run := range s.State.Runs(fsm.RunFilter{}) {
		byState[run.State]++
	}
	for _, st := range api.RunStates {
		gauge(runsDesc, float64(byState[st]), string(st))
	}
	epoch, _ := s.State.Epoch()
	gauge(epochDesc, float64(epoch))
	// One series per job while the set is small; a large set exports its
	// paused jobs only (a missing series reads as not paused), so that a
	// scrape stays small whatever the set's size.
	q := jobs.Query{Limit: maxPausedSeries}
	if s.State.JobSetInfo().Count > maxPausedSeries {
		q.Paused = true
	}
	for _, e := range s.State.FindJobs(q).Jobs {
		gauge(pausedDesc, b2f(e.Spec.Paused), e.Spec.Name)
	}

	// Raft and gossip as this node sees them.
	leader, _ := s.Cluster.Leader()
	gauge(leaderKnownDesc, b2f(leader != ""))
	state := s.Cluster.State()
	for _, st := range raftStates {
		gauge(raftStateDesc, b2f(strings.EqualFold(state, st)), st)
	}
	if rs, ok := s.Cluster.RaftStats(); ok {
		gauge(termDesc, float64(rs.Term))
		gauge(lastIndexDesc, float64(rs.LastLogIndex))
		gauge(commitDesc, float64(rs.CommitIndex))
		gauge(appliedDesc, float64(rs.AppliedIndex))
		gauge(pendingDesc, float64(rs.CommitIndex-min(rs.AppliedIndex, rs.CommitIndex)))
		contact := -1.0 // never
		switch {
		case rs.Leader:
			contact = 0
		case !rs.LastContact.IsZero():
			contact = max(time.Since(rs.LastContact), 0).Seconds()
		}
		gauge(contactDesc, contact)
	}
	if vs, err := s.Cluster.Voters(); err == nil {
		n := 0
		for _, v := range vs {
			if v.Voter {
				n++
			}
		}
		gauge(votersDesc, float64(n))
	}
	members := map[string]int{}
	for _, m := range s.Cluster.Members() {
		members[m.State]++
	}
	for _, st := range gossipStates {
		gauge(membersDesc, float64(members[st]), st)
	}
}

// initMetrics registers the API's and the guard's figures and the
// collectors of the replicated state on the node's registry, and builds
// the handler; once.
func (s *Server) initMetrics() error {
	if s.metricsHandler != nil {
		return nil
	}
	reg := s.Metrics.Registry()
	cs := []prometheus.Collector{stateCollector{s}, jobCollector{s}, groupCollector{s}, notifyCollector{s}}
	cs = append(cs, s.api.Metrics.Collectors()...)
	for _, c := range append(cs, s.guard.Collectors()...) {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w (one metrics.Node per Server)", err)
		}
	}
	s.metricsHandler = promhttp.HandlerFor(reg, s.metricsOpts())
	return nil
}

func (s *Server) metricsOpts() promhttp.HandlerOpts {
	return promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.Logger.Handler(), slog.LevelError),
		// A collector that fails leaves out its figures, not the rest.
		ErrorHandling: promhttp.ContinueOnError,
	}
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	id, ok := auth.IdentityOf(r.Context())
	if !ok || id.AllNamespaces(acl.CapRead) {
		s.metricsHandler.ServeHTTP(w, r)
		return
	}
	// An operator who may not read every namespace scrapes the node's
	// figures without the series of the jobs and groups it may not read.
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := s.Metrics.Registry().Gather()
		return readableSeries(mfs, func(ns string) bool { return id.Allowed(ns, acl.CapRead) }), err
	})
	promhttp.HandlerFor(g, s.metricsOpts()).ServeHTTP(w, r)
}

// namespacedLabels are the labels whose value names a job or a
// concurrency group, qualified by its namespace.
var namespacedLabels = []string{"job_name", "group"}

// readableSeries drops the series of mfs whose job or group is of a
// namespace allow refuses, and the families left without a series.
func readableSeries(mfs []*dto.MetricFamily, allow func(ns string) bool) []*dto.MetricFamily {
	out := mfs[:0]
	for _, mf := range mfs {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if seriesReadable(m, allow) {
				kept = append(kept, m)
			}
		}
		if mf.Metric = kept; len(kept) > 0 {
			out = append(out, mf)
		}
	}
	return out
}

func seriesReadable(m *dto.Metric, allow func(ns string) bool) bool {
	for _, l := range m.GetLabel() {
		if slices.Contains(namespacedLabels, l.GetName()) && !allow(fencedstore.JobNamespace(l.GetValue())) {
			return false
		}
	}
	return true
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	groupRunningDesc = prometheus.NewDesc("fencecron_group_running", "Runs of the concurrency group's jobs holding a place (granted and not finished, retries included).", []string{"group"}, nil)
	groupWaitingDesc = prometheus.NewDesc("fencecron_group_waiting", "Runs waiting for a place in the concurrency group (queue depth).", []string{"group"}, nil)
	groupOldestDesc  = prometheus.NewDesc("fencecron_group_oldest_waiter_age_seconds", "How long the concurrency group's oldest waiter has waited; 0 with none.", []string{"group"}, nil)
)

// groupCollector reads the concurrency groups of the replicated state at
// scrape time: the same on every server (aggregate with max()).
type groupCollector struct{ s *Server }

func (c groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- groupRunningDesc
	ch <- groupWaitingDesc
	ch <- groupOldestDesc
}

func (c groupCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.s.api.Groups() {
		ch <- prometheus.MustNewConstMetric(groupRunningDesc, prometheus.GaugeValue, float64(len(g.Running)), g.Name)
		ch <- prometheus.MustNewConstMetric(groupWaitingDesc, prometheus.GaugeValue, float64(len(g.Waiting)), g.Name)
		ch <- prometheus.MustNewConstMetric(groupOldestDesc, prometheus.GaugeValue, g.OldestWaitSeconds, g.Name)
	}
}

var (
	notifyBackingOffDesc = prometheus.NewDesc("fencecron_notify_target_backing_off",
		"1 while a notification target (scheme://host) did not answer its last try and is backed off; on the leader only.", []string{"target"}, nil)
	notifyFailuresDesc = prometheus.NewDesc("fencecron_notify_target_failures",
		"Tries in a row the notification target (scheme://host) did not answer; on the leader only.", []string{"target"}, nil)
	notifyPendingDesc = prometheus.NewDesc("fencecron_notify_target_pending",
		"Notifications pending for the target (scheme://host), in flight included; on the leader only.", []string{"target"}, nil)
)

// notifyCollector reads the leader's notification targets at scrape
// time. Targets that share a scheme and host (two Slack webhooks) are one
// series: the worst of them, their notices summed.
type notifyCollector struct{ s *Server }

func (c notifyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- notifyBackingOffDesc
	ch <- notifyFailuresDesc
	ch <- notifyPendingDesc
}

func (c notifyCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.api.NotifyStatus()
	if st == nil {
		return
	}
	type figures struct{ backingOff, failures, pending float64 }
	by := map[string]*figures{}
	var order []string
	for _, t := range st.Targets {
		f := by[t.Target]
		if f == nil {
			f = &figures{}
			by[t.Target] = f
			order = append(order, t.Target)
		}
		f.backingOff = max(f.backingOff, b2f(t.BackingOff))
		f.failures = max(f.failures, float64(t.Failures))
		f.pending += float64(t.Pending)
	}
	for _, name := range order {
		f := by[name]
		ch <- prometheus.MustNewConstMetric(notifyBackingOffDesc, prometheus.GaugeValue, f.backingOff, name)
		ch <- prometheus.MustNewConstMetric(notifyFailuresDesc, prometheus.GaugeValue, f.failures, name)
		ch <- prometheus.MustNewConstMetric(notifyPendingDesc, prometheus.GaugeValue, f.pending, name)
	}
}

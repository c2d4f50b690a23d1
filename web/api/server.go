// Package api answers the public JSON API under /api/v1: handlers that
// decode a request, make one call through the small interfaces below and
// write the answer; the one place errors become answers (Error, through
// the table in scheduler/wire); and the reads of the replicated state and
// the history that the dashboard (web/pages) shows too, so a page and the
// API never disagree about what a job or a run is.
//
// web mounts it beside the dashboard; it knows nothing of pages but a
// function that renders an error as one (ErrorPage).
package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/web/auth"
)

// Cluster is the membership and Raft view the API shows.
type Cluster interface {
	ID() string
	State() string
	Leader() (id, addr string)
	LeaderHTTP() (string, error)
	Members() []election.Member
	Voters() ([]election.Voter, error)
	Meta() election.Meta
	// RaftStats returns this node's Raft figures; false on a worker.
	RaftStats() (election.RaftStats, bool)
}

// State is the replicated scheduler state the API shows.
type State interface {
	Epoch() (uint64, string)
	// ExportJobSet returns the whole job set, shared and read-only (see
	// fsm.JobSetExport): what GET /api/v1/jobset writes out.
	ExportJobSet() fsm.JobSetExport
	JobSetInfo() fsm.JobSetInfo
	// FindJobs returns a page of the job set (see jobs.Query),
	// copying only the page: what serves requests, whatever the set's size.
	FindJobs(q jobs.Query) jobs.Page
	// Spec returns one job of the set.
	Spec(name string) (jobs.Spec, bool)
	Runs(f fsm.RunFilter) []jobs.Run
	LastRun(job string) (jobs.Run, bool)
	Events(after uint64, limit int) []jobs.Event
	Skips(job string) []jobs.SkipRange
	Counters() map[string]uint64
	// Overload is the cluster's overload as the log tells it: the fire
	// times the leader shed because no worker had room.
	Overload() jobs.Overload
	// Subscribe returns a channel signalled, coalesced, after every change,
	// and a function that ends the subscription.
	Subscribe() (<-chan struct{}, func())
}

// Scheduler is what the API changes through: every call goes to the
// leader, forwarded if this node does not lead (scheduler.Scheduler).
type Scheduler interface {
	// SetJobsKnown replaces the job set, or with a scope (namespace
	// globs) only the jobs of the namespaces it matches; known marks the
	// jobs that are the replicated set's, as it holds them (none for a
	// set sent whole). specs is handed over: a leader normalizes it in
	// place.
	SetJobsKnown(ctx context.Context, specs []jobs.Spec, known scheduler.KnownJobs, source string, scope []string) (hash string, err error)
	// SetJobsChanges applies a job set given as what changed since the
	// replicated set ch.Base, where the leader can without the set they
	// make: else scheduler.ErrChangesNeedSet, and nothing changed.
	SetJobsChanges(ctx context.Context, ch scheduler.JobChanges, source string) (hash string, jobs int, err error)
	// Trigger starts a run now; force overrides the job's overlap policy.
	Trigger(ctx context.Context, job string, force bool) (jobs.Run, error)
	Pause(ctx context.Context, job string, paused bool) error
	// Audit records an entry of kind that node saw in the replicated
	// audit trail (login lockouts).
	Audit(ctx context.Context, kind, node, detail string) error
	// Release ends an attempt's lease now, on an operator's word (see
	// scheduler.Forwarder for its errors).
	Release(ctx context.Context, attempt, reason, asker string) (scheduler.Released, error)
	// Backfill queues runs for the fire times of a job's schedule that
	// have none, or with DryRun lists them.
	Backfill(ctx context.Context, req fsm.BackfillRequest) (fsm.BackfillResult, error)
	// ACL changes the access control state (acl.Decide decides it in
	// Apply).
	ACL(ctx context.Context, c acl.Cmd) error
}

// Server answers /api/v1 for one node.
type Server struct {
	Cluster   Cluster
	State     State
	Scheduler Scheduler
	// History keeps runs and events beyond State's hot window; nil: the
	// hot window only.
	History History
	// Store serves the store's endpoints (store, establish, history,
	// floor): the caller picks the adapter; nil: they are not routed.
	Store http.Handler
	// Operator serves the operator endpoints (operator.go); nil: they
	// answer 404.
	Operator Operator
	// Outputs asks workers for running attempts' output (output.go); nil:
	// only finished attempts' recorded output is shown.
	Outputs Outputs
	// Notifications, if set, is this node's notification sender: while
	// the node leads, the status shows its targets (notify.go).
	Notifications NotifyTargets
	// Guard judges who may change things and see secrets.
	Guard  *auth.Guard
	Clock  jobs.Clock
	Logger *slog.Logger
	// HTTPS says browsers and clients reach this node over TLS (api.tls):
	// the links an answer gives use https.
	HTTPS bool
	// ErrorPage renders an error as a page, for a browser's form posted
	// without script (see wantsHTML); nil: every error is JSON.
	ErrorPage func(w http.ResponseWriter, r *http.Request, code int, err error)
	// MaxEventStreams caps the open event streams; EventHeartbeat is how
	// often an idle one sends a comment (see events.go).
	MaxEventStreams int
	EventHeartbeat  time.Duration
	Metrics         *Metrics
	// ACLState reads the replicated ACL state (nil: ACLs cannot be on).
	ACLState func() *acl.State

	streams atomic.Int64 // open event streams
	exports atomic.Int64 // job set exports being written (reads.go)
	// restoring is held by the one restore in progress: each holds a
	// snapshot of up to maxSnapshotBytes, decoded, in memory.
	restoring sync.Mutex
	digests   digestCache // the digests of the replicated job set (jobsetdigests.go)
}

// Routes mounts the API on r (web routes /api/v1 here).
func (s *Server) Routes(r chi.Router) {
	r.Get("/status", s.handleStatus)
	r.With(s.HoldsState).Get("/jobs", s.handleJobs)
	r.With(s.HoldsState).Get("/jobs/{name}", s.handleJob)
	r.With(s.HoldsState).Get("/jobs/{name}/explain", s.handleExplain)
	r.With(s.requireWrite).Post("/jobs/{name}/trigger", s.handleTrigger)
	r.With(s.requireWrite).Post("/jobs/{name}/backfill", s.handleBackfill)
	r.With(s.requireWrite).Post("/jobs/{name}/pause", s.handlePause(true))
	r.With(s.requireWrite).Post("/jobs/{name}/resume", s.handlePause(false))
	r.With(s.requireWrite).Post("/attempts/{id}/release", s.handleRelease)
	r.With(s.HoldsState).Get("/events", s.handleEvents)
	r.With(s.HoldsState).Get("/groups", s.handleGroups)
	r.With(s.HoldsState).Get("/runs", s.handleRuns)
	r.Get("/attempts/{id}/output", s.handleAttemptOutput)
	r.With(s.HoldsState).Get("/skips", s.handleSkips)
	if s.Store != nil {
		r.Handle("/store", s.Store)
		r.Handle("/store/*", s.Store)
		r.Handle("/establish/*", s.Store)
		r.Handle("/history/*", s.Store)
		r.Handle("/floor", s.Store)
	}
	r.With(s.HoldsState).Get("/jobset", s.handleJobSet)
	r.With(s.requireWrite).Put("/jobset", s.handleApplyJobSet)
	// A worker holds no set to take jobs from: it answers 421, and
	// `fencecron apply` sends it the whole set, which it forwards.
	r.With(s.HoldsState, s.requireWrite).Put("/jobset/digests", s.handleApplyJobDigests)
	r.With(s.HoldsState, s.requireWrite).Put("/jobset/changes", s.handleApplyJobChanges)
	// Operators (operator.go): Raft's servers, backups and restores.
	r.Get("/operator/raft/peers", s.handlePeers)
	r.With(s.requireWrite).Delete("/operator/raft/peers/{id}", s.handleRemovePeer)
	r.With(s.requireWrite).Get("/snapshot", s.handleSnapshotSave)
	r.With(s.requireWrite).Put("/snapshot", s.handleSnapshotRestore)
	s.aclRoutes(r)
}

// requireWrite guards the mutating endpoints (auth.Guard).
func (s *Server) requireWrite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.Guard.AuthorizeWrite(r); err != nil {
			s.Error(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Metrics are the API's own figures, for the node's registry.
type Metrics struct {
	// EventStreams are open; EventStreamsRefused were answered 503
	// because MaxEventStreams were.
	EventStreams        prometheus.Gauge
	EventStreamsRefused prometheus.Counter
	// ExportsRefused counts job set exports answered 503 because
	// maxJobSetExports were being written.
	ExportsRefused prometheus.Counter
}

// NewMetrics returns the API's figures, at zero.
func NewMetrics() *Metrics {
	return &Metrics{
		EventStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencecron_http_event_streams",
			Help: "Open server-sent event streams (dashboards watching this node).",
		}),
		EventStreamsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencecron_http_event_streams_refused_total",
			Help: "Event streams refused because api.limits.max_event_streams were open.",
		}),
		ExportsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencecron_http_jobset_exports_refused_total",
			Help: "Exports of the whole job set (GET /api/v1/jobset) refused for now because as many as a node writes at once were being written.",
		}),
	}
}

// Collectors are the figures to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.EventStreams, m.EventStreamsRefused, m.ExportsRefused}
}

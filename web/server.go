// Package web serves fencecron's HTTP API and dashboard. Handlers decode,
// make one call, and render; errors become status codes in one place.
package web

import (
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

//go:embed templates/*.html templates/*.svg static
var assets embed.FS

// Cluster is the membership and Raft view the API shows.
type Cluster interface {
	ID() string
	State() string
	Leader() (id, addr string)
	LeaderHTTP() (string, error)
	Members() []election.Member
	Voters() ([]election.Voter, error)
	Meta() election.Meta
}

// State is the replicated scheduler state the API shows.
type State interface {
	Epoch() (uint64, string)
	JobSet() (specs []jobs.Spec, source string, at time.Time, ok bool)
	JobSetInfo() scheduler.JobSetInfo
	Runs(f scheduler.RunFilter) []jobs.Run
	LastRun(job string) (jobs.Run, bool)
	Events(after uint64, limit int) []jobs.Event
	Skips(job string) []jobs.SkipRange
	Counters() map[string]uint64
	// Subscribe returns a channel signalled, coalesced, after every change,
	// and a function that ends the subscription.
	Subscribe() (<-chan struct{}, func())
}

// Scheduler is what the API changes through: every call goes to the
// leader, forwarded if this node does not lead.
type Scheduler interface {
	SetJobs(ctx context.Context, specs []jobs.Spec, source string) (hash string, err error)
	Trigger(ctx context.Context, job string) (jobs.Run, error)
	Pause(ctx context.Context, job string, paused bool) error
	// ApplyForwarded, TriggerLocal and RenewLocal answer other nodes.
	ApplyForwarded(ctx context.Context, body []byte) scheduler.WireResult
	TriggerLocal(ctx context.Context, job string) (jobs.Run, error)
	RenewLocal(attempt, node string) (scheduler.RenewReply, error)
}

// Server is the HTTP server of one node.
type Server struct {
	Addr      string
	Cluster   Cluster
	State     State
	Scheduler Scheduler
	// Worker takes assignments dispatched to this node.
	Worker interface {
		Accept(scheduler.Assignment) error
	}
	Store fencedstore.Store
	// TLS is the node's cluster identity: other nodes and job processes
	// reach this port over TLS with it (see tlsmux.go); the internal API
	// takes only peers that prove they hold it.
	TLS *clustertls.Identity
	// PublicTLS, if set (api.tls), is what browsers and API clients get
	// over TLS; plain HTTP requests are then sent to HTTPS.
	PublicTLS *tls.Config
	Clock     jobs.Clock
	Logger    *slog.Logger

	// StoreAPI serves the store's endpoints (reads and writes); nil serves
	// Store read-only.
	StoreAPI http.Handler

	// APIToken, if set, is required by the mutating public endpoints and
	// the dashboard's buttons; ReadOnly refuses them all (see auth.go).
	APIToken string
	ReadOnly bool
	// Metrics holds this node's own counters (give the same value to the
	// worker as its Observer); nil: a fresh, empty one.
	Metrics *Metrics

	ln      net.Listener
	srv     *http.Server
	pages   map[string]*template.Template
	baseCtx context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

// init sets defaults and parses the templates; Open and tests call it.
func (s *Server) init() error {
	if s.Clock == nil {
		s.Clock = jobs.SystemClock{}
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Metrics == nil {
		s.Metrics = NewMetrics()
	}
	pages, err := parsePages()
	if err != nil {
		return err
	}
	s.pages = pages
	return nil
}

// Open listens on Addr and starts serving. Listening happens before
// serving, so Addr ":0" is resolved by the time Open returns (see URL).
func (s *Server) Open() error {
	if err := s.init(); err != nil {
		return err
	}
	if s.TLS == nil {
		return errors.New("http server: no cluster TLS identity")
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", s.Addr, err)
	}
	s.ln = ln
	mux := newMuxListener(ln, s.TLS.ServerConfig(clustertls.ProtoHTTP, false), s.PublicTLS)
	// Event streams run under base: Close cancels it before Shutdown,
	// which would otherwise wait for them forever.
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	s.srv = &http.Server{
		Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return s.baseCtx },
		// Strangers' failed TLS handshakes are not worth a line each.
		ErrorLog: slog.NewLogLogger(s.Logger.Handler(), slog.LevelDebug),
	}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(mux); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.Logger.Error("http server stopped", "err", err)
		}
	}()
	return nil
}

// URL returns the server's base URL for browsers and the CLI: https when
// api.tls is set.
func (s *Server) URL() string {
	if s.PublicTLS != nil {
		return "https://" + s.ln.Addr().String()
	}
	return "http://" + s.ln.Addr().String()
}

// Close stops the server, letting in-flight requests finish until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	s.cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	return err
}

// Handler returns the router. Call it after Open (or init, in tests).
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.plainPolicy)
	// The dashboard (pages.go).
	r.Get("/", s.handleOverview)
	r.Get("/jobs", s.handleJobsPage)
	r.Get("/jobs/{name}", s.handleJobPage)
	r.Get("/store", s.handleStorePage)
	r.Get("/store/*", s.handleKeyPage)
	r.Get("/events", s.handleEventsPage)
	r.Get("/timeline", s.handleTimelinePage)
	r.Get("/timeline.svg", s.handleTimelineSVG)
	r.Get("/login", s.handleLoginForm)
	r.Post("/login", s.handleLogin)
	r.Post("/logout", s.handleLogout)
	r.Handle("/static/*", staticHandler())
	r.Get("/metrics", s.handleMetrics)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	r.Get("/readyz", s.handleReady)
	r.Route("/api/v1", func(r chi.Router) {
		r.Get("/status", s.handleStatus)
		r.Get("/jobs", s.handleJobs)
		r.Get("/jobs/{name}", s.handleJob)
		r.With(s.requireWrite).Post("/jobs/{name}/trigger", s.handleTrigger)
		r.With(s.requireWrite).Post("/jobs/{name}/pause", s.handlePause(true))
		r.With(s.requireWrite).Post("/jobs/{name}/resume", s.handlePause(false))
		r.Get("/events", s.handleEvents)
		r.Get("/runs", s.handleRuns)
		r.Get("/skips", s.handleSkips)
		store := s.StoreAPI
		if store == nil {
			store = &httpstore.Handler{Store: s.Store, Logger: s.Logger}
		}
		r.Handle("/store", store)
		r.Handle("/store/*", store)
		r.Handle("/establish/*", store)
		r.Handle("/history/*", store)
		r.Get("/jobset", s.handleJobSet)
		r.With(s.requireWrite).Put("/jobset", s.handleApplyJobSet)
	})
	r.Route("/internal/v1", func(r chi.Router) {
		r.Use(s.requirePeer)
		r.Post("/apply", s.handleInternalApply)
		r.Post("/renew", s.handleInternalRenew)
		r.Post("/trigger", s.handleInternalTrigger)
		r.Post("/dispatch", s.handleInternalDispatch)
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.error(w, r, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, jobs.ErrNotFound))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.error(w, r, fmt.Errorf("%w: %s is not allowed on %s", errMethod, r.Method, r.URL.Path))
	})
	return r
}

// Port returns the port the server listens on.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

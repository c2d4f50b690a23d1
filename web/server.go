// Package web is each node's HTTP port: it mounts the dashboard and the
// public API (/api/v1, package web/api) on one router, behind what every
// request passes first (a handler's panic answered, foreign Host names
// refused, write deadlines, plain HTTP kept from what needs TLS), and
// serves that on one listener that sorts plain HTTP from cluster and
// public TLS (tlsmux.go). Who may act is package web/auth's to say; the
// figures at /metrics are assembled here.
//
// The calls between nodes share the port but not the package: web routes
// /internal/v1 to Server.Internal (scheduler/rpc.Server) and knows
// nothing more of them.
package web

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/election/netlimit"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/api"
	"github.com/fencecron/fencecron/web/auth"
	"github.com/fencecron/fencecron/web/metrics"
	"github.com/fencecron/fencecron/web/pages"
)

// Server is the HTTP server of one node.
type Server struct {
	Addr      string
	Cluster   api.Cluster
	State     api.State
	Scheduler api.Scheduler
	// History keeps runs and events beyond State's hot window; nil: the
	// hot window only.
	History api.History
	Store   fencedstore.Store
	// Internal serves the calls between nodes (scheduler/rpc.Server), on
	// this port under /internal/v1: web routes them there and nothing
	// more; the handler admits only nodes of the cluster. Nil: none.
	Internal http.Handler
	// TLS is the node's cluster identity: other nodes and job processes
	// reach this port over TLS with it (see tlsmux.go).
	TLS *clustertls.Identity
	// PublicTLS, if set (api.tls), is what browsers and API clients get
	// over TLS; plain HTTP requests are then sent to HTTPS.
	PublicTLS *tls.Config
	Clock     jobs.Clock
	Logger    *slog.Logger

	// Outputs asks workers for running attempts' output (api/output.go);
	// nil: only finished attempts' recorded output is shown.
	Outputs api.Outputs
	// ClockSkew, if set, names the peers whose clocks are off (pages/clockskew.go).
	ClockSkew pages.ClockSkew
	// Notifications, if set, is this node's notification sender: while
	// the node leads, the status, the Overview and /metrics show its
	// targets (api/notify.go).
	Notifications api.NotifyTargets

	// Operator serves the operator endpoints (api/operator.go); nil: they
	// answer 404.
	Operator api.Operator

	// StoreAPI serves the store's endpoints under /api/v1 (store,
	// establish, history, floor). The caller picks the adapter
	// (cmd/fencecron hands in fencedstore/httpstore's handler over the
	// node's store), so web depends on no store implementation; nil: those
	// paths answer 404. The dashboard reads Store directly either way.
	StoreAPI http.Handler

	// StoreRemote is the URL of the store another node serves to this
	// one (store.backend: remote); "" when the store is this node's own.
	StoreRemote string

	// APIToken, if set, is required by the mutating public endpoints and
	// the dashboard's buttons; without it only loopback clients may use
	// them; ReadOnly refuses them all (see web/auth).
	APIToken string
	ReadOnly bool
	// ACL turns access control on (acl: {enabled: true}): every route
	// needs the capability its row of auth.Routes names. ACLState reads
	// the replicated ACL state (fsm.FSM.ACL); NodeCredential is the store
	// credential nodes present.
	ACL            bool
	ACLState       func() *acl.State
	NodeCredential string
	// AdvertiseHosts are this node's own names (its node name and the
	// address it advertises); AllowedHosts are more names (host, or
	// host:port) from api.allowed_hosts. A plain-HTTP request must name
	// one of them, a loopback name or an IP address in its Host header
	// (see host.go).
	AdvertiseHosts []string
	AllowedHosts   []string
	// Limits bound the HTTP server; zero fields take DefaultLimits.
	Limits Limits
	// Metrics is this node's registry of metrics (give the same value to
	// the worker as its Observer); the server adds its own figures and the
	// replicated state's collector to it, and serves it at /metrics. nil:
	// a fresh one. One Server per metrics.Node.
	Metrics *metrics.Node

	ln             net.Listener
	srv            *http.Server
	dashboard      *pages.Dashboard
	baseCtx        context.Context
	cancel         context.CancelFunc
	done           chan struct{}
	metricsHandler http.Handler
	// guard judges who may act (web/auth); Close waits for the lockouts
	// it is writing to the audit trail.
	guard *auth.Guard
	// api answers /api/v1 and holds the reads the dashboard shows too.
	api *api.Server
}

// maxSniff bounds how long a new connection may stay silent.
const maxSniff = 5 * time.Second

// Limits bound what one node's HTTP server gives its clients, so slow or
// many clients cannot hold its descriptors and goroutines forever.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers; ReadTimeout
	// the whole request, body included (a body that never finishes is
	// cut then); WriteTimeout writing a response, set per request so the
	// event stream can manage its own; IdleTimeout how long a keep-alive
	// connection may wait for its next request.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's header block.
	MaxHeaderBytes int
	// MaxConnections caps the connections served at once: more wait in
	// the listen queue until one closes. MaxConnectionsPerClient caps
	// those of one client (an IPv4 address, an IPv6 /64; not loopback):
	// more are closed at once, so one host cannot take every slot (see
	// election/netlimit). MaxEventStreams caps the open /api/v1/events
	// streams: one more is answered 503 with Retry-After.
	MaxConnections, MaxConnectionsPerClient, MaxEventStreams int
	// EventHeartbeat is how often an idle event stream sends a comment.
	EventHeartbeat time.Duration
}

// DefaultLimits are the limits a zero field of Server.Limits takes, and
// the defaults of the config's api.limits.
var DefaultLimits = Limits{
	ReadHeaderTimeout:       10 * time.Second,
	ReadTimeout:             30 * time.Second,
	WriteTimeout:            2 * time.Minute,
	IdleTimeout:             2 * time.Minute,
	MaxHeaderBytes:          64 << 10,
	MaxConnections:          1024,
	MaxConnectionsPerClient: 64,
	MaxEventStreams:         64,
	EventHeartbeat:          15 * time.Second,
}

// withDefaults returns l with every zero field set from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	pick(&l.ReadTimeout, d.ReadTimeout)
	pick(&l.WriteTimeout, d.WriteTimeout)
	pick(&l.IdleTimeout, d.IdleTimeout)
	pick(&l.EventHeartbeat, d.EventHeartbeat)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxConnections <= 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.MaxConnectionsPerClient <= 0 {
		l.MaxConnectionsPerClient = d.MaxConnectionsPerClient
	}
	if l.MaxEventStreams <= 0 {
		l.MaxEventStreams = d.MaxEventStreams
	}
	return l
}

// init sets defaults, builds the guard and the API over the Server's
// fields and parses the templates, once: Open and tests call it, a test
// maybe both.
func (s *Server) init() error {
	if s.api != nil {
		return nil
	}
	if s.Clock == nil {
		s.Clock = jobs.SystemClock{}
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Metrics == nil {
		s.Metrics = metrics.New()
	}
	// Event streams and the audits of lockouts run under base: Close
	// cancels it before Shutdown, which would otherwise wait for the
	// streams forever.
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	s.guard = auth.New(auth.Config{Token: s.APIToken, ReadOnly: s.ReadOnly, Clock: s.Clock, Logger: s.Logger,
		Auditor: s.Scheduler, Node: s.Cluster.ID(), Base: s.baseCtx,
		ACL: s.ACL, ACLState: s.ACLState, NodeCredential: s.NodeCredential})
	s.Limits = s.Limits.withDefaults()
	s.api = &api.Server{
		Cluster: s.Cluster, State: s.State, Scheduler: s.Scheduler, History: s.History, Store: s.StoreAPI,
		Operator: s.Operator, Outputs: s.Outputs, Notifications: s.Notifications,
		Guard: s.guard, Clock: s.Clock, Logger: s.Logger, HTTPS: s.PublicTLS != nil,
		MaxEventStreams: s.Limits.MaxEventStreams, EventHeartbeat: s.Limits.EventHeartbeat,
		Metrics: api.NewMetrics(), ACLState: s.ACLState,
	}
	dashboard, err := pages.New(pages.Dashboard{API: s.api, Store: s.Store, ClockSkew: s.ClockSkew, Guard: s.guard, Metrics: s.Metrics, StoreRemote: s.StoreRemote})
	if err != nil {
		return err
	}
	s.dashboard, s.api.ErrorPage = dashboard, dashboard.RenderError
	if err := s.initMetrics(); err != nil {
		return err
	}
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
	// No WriteTimeout here: it would cut event streams. Handler sets a
	// write deadline per request instead (see limitWrites), which the
	// event stream replaces with its own.
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.Limits.ReadHeaderTimeout,
		ReadTimeout:       s.Limits.ReadTimeout,
		IdleTimeout:       s.Limits.IdleTimeout,
		MaxHeaderBytes:    s.Limits.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
		// Strangers' failed TLS handshakes are not worth a line each.
		ErrorLog: slog.NewLogLogger(s.Logger.Handler(), slog.LevelDebug),
	}
	s.done = make(chan struct{})
	served := s.listener(ln)
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(served); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
	s.guard.Close()
	return err
}

// listener wraps the socket Open listens on in what every connection
// goes through before the HTTP server: the connection caps, then sorting
// plain from TLS (tlsmux.go). A connection gets at most maxSniff (or the
// header timeout, if shorter) to send its first byte: a real client sends
// it at once, and a stranger's silent connection must not hold a slot.
func (s *Server) listener(ln net.Listener) net.Listener {
	return newMuxListener(netlimit.Listener(ln, s.Limits.MaxConnections, s.Limits.MaxConnectionsPerClient), s.Logger, min(s.Limits.ReadHeaderTimeout, maxSniff),
		s.TLS.ServerConfig(clustertls.ProtoHTTP, false), s.PublicTLS)
}

// Handler returns the router. Call it after Open (or init, in tests).
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	// Before any handler: log and answer a handler's panic (recover.go),
	// refuse hosts this node does not answer to (host.go; before
	// plainPolicy, which may redirect to r.Host), bound how long a
	// response may take to write, and limit what plain HTTP may do
	// (tlsmux.go).
	r.Use(s.recoverPanics, s.checkHost, s.limitWrites, s.plainPolicy)
	// Then who may use the route (acl.go; nothing with ACLs off).
	r.Use(s.enforceACL(r))
	// The dashboard (web/pages).
	s.dashboard.Routes(r)
	r.Get("/metrics", s.handleMetrics)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	r.Get("/readyz", s.api.Ready)
	r.Route("/api/v1", s.api.Routes)
	if s.Internal != nil {
		// The nodes' own calls: the handler checks who calls.
		r.Handle(internalPrefix+"/*", s.Internal)
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.api.Error(w, r, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, wire.ErrNoRoute))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.api.Error(w, r, fmt.Errorf("%w: %s is not allowed on %s", wire.ErrMethod, r.Method, r.URL.Path))
	})
	return r
}

// limitWrites gives every response Limits.WriteTimeout to be written, so
// a client that stops reading does not hold its connection forever. It
// is a deadline per request rather than http.Server.WriteTimeout, which
// would also cut event streams; handleEvents sets its own per write.
func (s *Server) limitWrites(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Not every ResponseWriter supports deadlines (httptest's); then
		// there is nothing to bound.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.Limits.WriteTimeout))
		next.ServeHTTP(w, r)
	})
}

// internalPrefix is where the calls between nodes go (scheduler/rpc's
// Prefix): Server.Internal serves them.
const internalPrefix = "/internal/v1"

// Port returns the port the server listens on.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

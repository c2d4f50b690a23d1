// Package agent builds one fencecron node from its config
// (cmd/internal/config) and runs it until its context ends: `fencecron
// agent` hands it a config file's, `fencecron dev` one built from the
// same defaults. Run picks the concrete parts (election, scheduler,
// worker, store backend, web server) and wires them, one step at a time.
package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/faults"
	"github.com/fencecron/fencecron/scheduler/fsm"
	historydb "github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/scheduler/rpc"
	"github.com/fencecron/fencecron/scheduler/worker"
	"github.com/fencecron/fencecron/web"
	"github.com/fencecron/fencecron/web/metrics"
)

// shutdownBudget is how long a node may take to stop after Ctrl-C.
const shutdownBudget = 5 * time.Second

// Options are what a node takes besides its config.
type Options struct {
	// Logger is the node's log; nil: slog.Default().
	Logger *slog.Logger
	// Faults injects failures for tests (FENCECRON_FAULTS; only a test
	// build has them); nil: none.
	Faults *faults.Faults
	// Jobs are this node's own jobs; nil: it has none.
	Jobs *Jobs
}

// Jobs are a node's own jobs (its config's, or dev's): they seed a
// cluster that has no job set yet, and the node reports their hash so
// that drift between nodes shows.
type Jobs struct {
	Specs []jobs.Spec
	// Source says where Specs come from, in the job set's history.
	Source string
	// Replace applies Specs over a different applied set too.
	Replace bool
	// Reload, if set, re-reads them on SIGHUP.
	Reload func() (specs []jobs.Spec, source string, err error)
}

// node is one node being built and run: its config and the parts wired
// so far, and how to stop them.
type node struct {
	cfg *config.File
	opt Options
	log *slog.Logger
	// closers stop the parts opened so far, in reverse order.
	closers []func(context.Context) error

	bind, advertise string
	signer          *fencedstore.Signer
	id              *clustertls.Identity
	caFile          string
	publicTLS       *tls.Config
	store           fencedstore.Store
	maxBody         int64
	fsm             *fsm.FSM
	hist            *historydb.Store
	raft            *election.Node
	peers           *rpc.Client
	sched           *scheduler.Scheduler
	clock           jobs.Clock
	skew            *scheduler.SkewMonitor
	metrics         *metrics.Node
	worker          *worker.Worker
	internal        *rpc.Server
	srv             *web.Server
	// traces is the node's trace export; nil: tracing off.
	traces *sdktrace.TracerProvider
}

// Run wires one node from cfg and runs it until ctx ends, then stops the
// parts in reverse order within shutdownBudget. cfg is a parsed config
// (config.Load) or config.Defaults with fields set; Run applies no
// defaults of its own.
func Run(ctx context.Context, cfg *config.File, opt Options) error {
	n := &node{cfg: cfg, opt: opt, log: cmp.Or(opt.Logger, slog.Default())}
	defer n.shutdown()
	for _, step := range []func() error{
		n.openDataDir,
		n.openIdentity,
		n.openStore,
		n.openRaft,
		n.openTelemetry,
		n.newScheduler,
		n.newWorker,
		n.newWeb,
		n.start,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	n.logReady()
	return n.serve(ctx)
}

// closeWith adds a part's closer.
func (n *node) closeWith(c func(context.Context) error) { n.closers = append(n.closers, c) }

// shutdown stops the parts opened, the last first, within shutdownBudget.
func (n *node) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	start := time.Now()
	for i := len(n.closers) - 1; i >= 0; i-- {
		if err := n.closers[i](ctx); err != nil {
			n.log.Warn("shutdown", "err", err)
		}
	}
	n.log.Info("stopped", "took", time.Since(start).Round(time.Millisecond))
}

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
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
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
	closers []closer

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
// defaults of its own. A stop cut short (a part overran the budget) is
// an error, so the process exits as failed, as after the crash it is.
func Run(ctx context.Context, cfg *config.File, opt Options) (err error) {
	n := &node{cfg: cfg, opt: opt, log: cmp.Or(opt.Logger, slog.Default())}
	defer func() {
		if serr := n.shutdown(shutdownBudget); err == nil {
			err = serr
		}
	}()
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

// closer stops one part of a node.
type closer struct {
	part  string
	close func(context.Context) error
}

// stopGrace is how long a part may take to answer past the shutdown
// budget before it is left running.
const stopGrace = time.Second

// closeWith adds how to stop a part.
func (n *node) closeWith(part string, c func(context.Context) error) {
	n.closers = append(n.closers, closer{part, c})
}

// shutdown stops the parts opened, the last first, within budget: their
// closers' context ends with it. Past it, each part still gets
// stopGrace of its own to answer, so one slow part does not cost the next
// its chance, and a part that returns as its context ends is not taken
// for stuck because the machine was slow to run it. A part that overruns that is left running, with every
// part not stopped yet (it may be using them), and the process exits as
// after a crash, which Raft's log and the stores are written to survive:
// otherwise one stuck part would hold the node until its supervisor
// killed it, and say nothing of why.
func (n *node) shutdown(budget time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	deadline, _ := ctx.Deadline()
	for i := len(n.closers) - 1; i >= 0; i-- {
		c := n.closers[i]
		done := make(chan error, 1)
		go func() { done <- c.close(ctx) }()
		giveUp := time.NewTimer(max(time.Until(deadline), 0) + stopGrace)
		select {
		case err := <-done:
			giveUp.Stop()
			if err != nil {
				n.log.Warn("shutdown", "part", c.part, "err", err)
			}
		case <-giveUp.C:
			var left []string
			for j := i - 1; j >= 0; j-- {
				left = append(left, n.closers[j].part)
			}
			n.log.Error("shutdown: a part did not stop within the budget; exiting without stopping it or the parts after it, as after a crash",
				"part", c.part, "budget", budget, "not_stopped", left, "goroutines", n.dumpGoroutines())
			return fmt.Errorf("stop cut short: %s did not stop within %s", c.part, budget)
		}
	}
	n.log.Info("stopped", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// dumpGoroutines writes every goroutine's stack to a file in the data
// directory, for the report of a stuck shutdown, and returns its path
// (or why there is none).
func (n *node) dumpGoroutines() string {
	path := filepath.Join(n.cfg.Node.DataDir, "shutdown-goroutines.txt")
	f, err := os.Create(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		return err.Error()
	}
	return path
}

package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/deploy/examples"
	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/web"
)

// shutdownBudget is how long a node may take to stop after Ctrl-C.
const shutdownBudget = 5 * time.Second

func runDev(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", "127.0.0.1:8080", "HTTP address for the API and dashboard")
	dataDir := fs.String("data", filepath.Join(os.TempDir(), "fencecron-dev"), "data directory (Raft log, snapshots, store)")
	raftPort := fs.Int("raft-port", 7947, "Raft port on 127.0.0.1")
	gossipPort := fs.Int("gossip-port", 7946, "gossip port on 127.0.0.1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := newLogger(stderr)
	log.Info("fencecron dev: a single-node cluster with the example jobs", "data", *dataDir)
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	cfg, err := config.Parse("deploy/examples/dev.yaml", examples.Dev)
	if err != nil {
		return err
	}
	specs, err := cfg.Specs()
	if err != nil {
		return err
	}
	return runNode(ctx, log, nodeOptions{
		ID:          "dev",
		DataDir:     *dataDir,
		HTTPAddr:    *httpAddr,
		RaftPort:    *raftPort,
		GossipPort:  *gossipPort,
		Bootstrap:   true,
		InitialJobs: specs, InitialSource: "embedded deploy/examples/dev.yaml",
	})
}

type nodeOptions struct {
	ID                   string
	DataDir              string
	HTTPAddr             string
	RaftPort, GossipPort int
	Bootstrap            bool
	Join                 []string
	InitialJobs          []jobs.Spec
	InitialSource        string
}

// runNode wires one node from concrete parts and runs it until ctx ends,
// then stops the parts in reverse order within shutdownBudget.
func runNode(ctx context.Context, log *slog.Logger, o nodeOptions) error {
	var closers []func(context.Context) error
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
		defer cancel()
		start := time.Now()
		for i := len(closers) - 1; i >= 0; i-- {
			if err := closers[i](sctx); err != nil {
				log.Warn("shutdown", "err", err)
			}
		}
		log.Info("stopped", "took", time.Since(start).Round(time.Millisecond))
	}()

	secret, err := loadOrCreateSecret(o.DataDir)
	if err != nil {
		return err
	}
	signer, err := fencedstore.NewSigner(secret)
	if err != nil {
		return err
	}

	store := bolt.New(filepath.Join(o.DataDir, "store.db"))
	if err := store.Open(); err != nil {
		return err
	}
	closers = append(closers, func(context.Context) error { return store.Close() })

	fsm := scheduler.NewFSM()
	node := election.New(election.Config{
		NodeID:     o.ID,
		DataDir:    o.DataDir,
		BindAddr:   "127.0.0.1",
		RaftPort:   o.RaftPort,
		GossipPort: o.GossipPort,
		Bootstrap:  o.Bootstrap,
		Join:       o.Join,
		Meta:       election.Meta{Role: election.RoleServer},
		Logger:     log,
	}, fsm)
	if err := node.Open(); err != nil {
		return err
	}
	closers = append(closers, node.Close)

	sched := scheduler.New(node, fsm)
	sched.Logger = log
	sched.InitialJobs, sched.InitialSource = o.InitialJobs, o.InitialSource

	srv := &web.Server{Addr: o.HTTPAddr, Cluster: node, State: fsm, Store: store, Logger: log,
		StoreAPI: &httpstore.Handler{Store: store, Signer: signer, MaxBodyBytes: store.MaxBodyBytes, Logger: log}}
	if err := srv.Open(); err != nil {
		return err
	}
	closers = append(closers, srv.Close)

	worker := &scheduler.Worker{
		ID: o.ID, Store: store, Reporter: sched, StoreAddr: srv.URL(),
		TokenText: tokenText(signer, log),
		Grace:     2 * time.Second, Logger: log,
	}
	if err := worker.Open(); err != nil {
		return err
	}
	closers = append(closers, worker.Close)
	sched.Dispatcher = worker
	if err := sched.Open(); err != nil {
		return err
	}
	closers = append(closers, sched.Close)

	log.Info("dashboard at "+srv.URL()+"/", "node", o.ID, "raft", node.RaftAddr(), "gossip", node.GossipAddr())
	<-ctx.Done()
	log.Info("shutting down", "budget", shutdownBudget)
	return nil
}

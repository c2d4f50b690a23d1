package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/fencedstore/postgres"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/web"
)

// shutdownBudget is how long a node may take to stop after Ctrl-C.
const shutdownBudget = 5 * time.Second

// nodeOptions is everything runNode needs, from `dev` flags or an
// `agent` config file.
type nodeOptions struct {
	ID                   string
	DataDir              string
	Server               bool
	RunJobs              bool
	Bind, Advertise      string
	HTTPPort             int
	RaftPort, GossipPort int
	BootstrapExpect      int
	Join                 []string
	Tags                 map[string]string
	Secret               []byte
	Profile              string
	ReapAfter            time.Duration

	// InitialJobs is applied if the cluster has no job set yet.
	InitialJobs   []jobs.Spec
	InitialSource string
	// ConfigHash is the hash of this node's own jobs, for drift reports.
	ConfigHash string
	// Store selects the fenced store backend; StorePath is the bolt file.
	Store     config.Store
	StorePath string
	// DropEnv names environment variables (the config's secrets) that
	// jobs must not inherit.
	DropEnv []string
	// Faults injects failures for tests (FENCECRON_FAULTS).
	Faults *scheduler.Faults
	// Reload, if set, re-reads this node's jobs on SIGHUP.
	Reload func() (specs []jobs.Spec, source string, err error)
	// API guards the public API and the dashboard (config's api section).
	API config.API
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
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return err
	}
	if o.Faults.Enabled() {
		log.Warn("FAULT INJECTION ENABLED: this node misbehaves on purpose (FENCECRON_FAULTS); never use it in production", "faults", os.Getenv("FENCECRON_FAULTS"))
	}

	// Job tokens are signed with a key derived from the cluster secret;
	// without a secret the store refuses every write over HTTP.
	var signer *fencedstore.Signer
	if len(o.Secret) > 0 {
		var err error
		if signer, err = fencedstore.NewSigner(o.Secret); err != nil {
			return err
		}
	}

	store, maxBody, closeStore, err := openStore(o, signer)
	if err != nil {
		return err
	}
	closers = append(closers, closeStore)

	fsm := scheduler.NewFSM()
	node := election.New(election.Config{
		NodeID:          o.ID,
		DataDir:         o.DataDir,
		BindAddr:        o.Bind,
		AdvertiseAddr:   o.Advertise,
		RaftPort:        o.RaftPort,
		GossipPort:      o.GossipPort,
		Server:          o.Server,
		BootstrapExpect: o.BootstrapExpect,
		Join:            o.Join,
		Secret:          o.Secret,
		Profile:         o.Profile,
		ReapAfter:       o.ReapAfter,
		Meta:            election.Meta{Tags: o.Tags, ConfigHash: o.ConfigHash, NoJobs: !o.RunJobs},
		Logger:          log,
	}, fsm)
	if err := node.Open(); err != nil {
		return err
	}
	closers = append(closers, node.Close)

	bind := o.Bind
	if bind == "" {
		bind = "127.0.0.1"
	}
	cred := election.InternalCredential(o.Secret)
	sched := scheduler.New(node, fsm)
	sched.Logger = log
	sched.InitialJobs, sched.InitialSource = o.InitialJobs, o.InitialSource
	peer := &web.Peer{Self: o.ID, Credential: cred, LeaderHTTP: node.LeaderHTTP, NodeHTTP: node.MemberHTTP, Servers: node.ServerHTTPs, Faults: o.Faults}
	sched.Forwarder, sched.Dispatcher = peer, peer

	metrics := web.NewMetrics()
	worker := &scheduler.Worker{
		ID: o.ID, Store: store, Leader: sched,
		Grace: 2 * time.Second, Faults: o.Faults, DropEnv: o.DropEnv, Logger: log,
		Observer: metrics,
	}
	if signer != nil {
		worker.TokenText = tokenText(signer, log)
	}
	peer.Local = worker
	srv := &web.Server{
		Addr: netJoin(bind, o.HTTPPort), Cluster: node, State: fsm, Scheduler: sched, Worker: worker,
		Store: store, Credential: cred, Logger: log,
		APIToken: o.API.Token, ReadOnly: o.API.ReadOnly, Metrics: metrics,
	}
	// Only a node that serves the store takes writes over HTTP; every
	// node shows it.
	storeAPI := &httpstore.Handler{Store: store, MaxBodyBytes: maxBody, Logger: log,
		QuotaKeys: int64(o.Store.Quota.Keys), QuotaBytes: o.Store.Quota.Bytes}
	if o.Store.Serve {
		storeAPI.Signer = signer
	}
	srv.StoreAPI = storeAPI
	if err := srv.Open(); err != nil {
		return err
	}
	closers = append(closers, srv.Close)
	// Jobs publish through the node that serves the store.
	worker.StoreAddr = srv.URL()
	if o.Store.Backend == config.BackendRemote {
		worker.StoreAddr = httpstore.NormalizeURL(o.Store.URL)
	}
	if err := worker.Open(); err != nil {
		return err
	}
	closers = append(closers, worker.Close)
	// Only now may others dispatch here: advertise the HTTP address.
	advertise := o.Advertise
	if advertise == "" {
		advertise = bind
	}
	node.UpdateMeta(func(m *election.Meta) { m.HTTPAddr = netJoin(advertise, srv.Port()) })
	if err := sched.Open(); err != nil {
		return err
	}
	closers = append(closers, sched.Close)

	access := "changes need the API token (api.token)"
	switch {
	case o.API.ReadOnly:
		access = "read-only: this node's API changes nothing (api.read_only)"
	case o.API.Token == "":
		access = "no API token: anyone who can reach this address can trigger, pause and resume jobs"
	}
	log.Info("dashboard at "+srv.URL()+"/", "node", o.ID, "raft", node.RaftAddr(), "gossip", node.GossipAddr(), "access", access)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "budget", shutdownBudget)
			return nil
		case <-hup:
			reload(ctx, log, o, node, sched)
		}
	}
}

// reload applies this node's config file to the cluster: the operator's
// explicit act (SIGHUP) that overrides the applied job set.
func reload(ctx context.Context, log *slog.Logger, o nodeOptions, node *election.Node, sched *scheduler.Scheduler) {
	if o.Reload == nil {
		log.Info("SIGHUP: no config file to reload")
		return
	}
	specs, source, err := o.Reload()
	if err != nil {
		log.Error("SIGHUP: config not applied; nothing changed", "err", err)
		return
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hash, err := sched.SetJobs(actx, specs, source)
	if err != nil {
		log.Error("SIGHUP: config not applied; nothing changed", "err", err)
		return
	}
	node.UpdateMeta(func(m *election.Meta) { m.ConfigHash = hash })
	log.Info("SIGHUP: applied this node's jobs to the cluster", "source", source, "hash", hash, "jobs", len(specs))
}

// openStore opens the fenced store the options select: the embedded bolt
// file (default), PostgreSQL, or the store another node serves.
func openStore(o nodeOptions, signer *fencedstore.Signer) (fencedstore.Store, int64, func(context.Context) error, error) {
	maxBody := o.Store.MaxBodyBytes
	if maxBody <= 0 {
		maxBody = fencedstore.DefaultMaxBodyBytes
	}
	retention := o.Store.HistoryRetention
	if retention <= 0 {
		retention = fencedstore.DefaultHistoryRetention
	}
	switch o.Store.Backend {
	case "", config.BackendBolt:
		path := o.StorePath
		if path == "" {
			path = filepath.Join(o.DataDir, "store.db")
		}
		s := bolt.New(path)
		s.MaxBodyBytes, s.HistoryRetention = maxBody, retention
		if err := s.Open(); err != nil {
			return nil, 0, nil, err
		}
		return s, maxBody, func(context.Context) error { return s.Close() }, nil
	case config.BackendPostgres:
		s := postgres.New(o.Store.URL)
		s.MaxBodyBytes, s.HistoryRetention = maxBody, retention
		if err := s.Open(); err != nil {
			return nil, 0, nil, err
		}
		return s, maxBody, func(context.Context) error { return s.Close() }, nil
	case config.BackendRemote:
		if signer == nil {
			return nil, 0, nil, fmt.Errorf("store backend remote needs cluster.secret to sign tokens")
		}
		return httpstore.NewClient(o.Store.URL, signer), maxBody, func(context.Context) error { return nil }, nil
	}
	return nil, 0, nil, fmt.Errorf("unknown store backend %q", o.Store.Backend)
}

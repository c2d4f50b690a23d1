package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/fencedstore/postgres"
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
	// PreviousSecret is accepted besides Secret while rolling to it.
	PreviousSecret []byte
	// ClusterTLS is an operator's own PKI for the links between nodes;
	// empty: derived from the secret.
	ClusterTLS config.TLSFiles
	// PublicTLS, if set, serves the dashboard and public API over HTTPS.
	PublicTLS config.TLSFiles
	Profile   string
	ReapAfter time.Duration
	// MaxClockSkew is cluster.max_clock_skew; zero: the default.
	MaxClockSkew time.Duration
	// History is the cluster's default run history (cluster.history);
	// zero fields: jobs.DefaultHistory.
	History jobs.History

	// InitialJobs is applied if the cluster has no job set yet.
	InitialJobs   []jobs.Spec
	InitialSource string
	// ReplaceJobs applies InitialJobs over a different set too.
	ReplaceJobs bool
	// ConfigHash is the hash of this node's own jobs, for drift reports.
	ConfigHash string
	// Store selects the fenced store backend; StorePath is the bolt file.
	Store     config.Store
	StorePath string
	// DropEnv names environment variables (the config's secrets) that
	// jobs must not inherit.
	DropEnv []string
	// JobNice is node.job_nice: how far below the node its jobs run.
	JobNice int
	// Faults injects failures for tests (FENCECRON_FAULTS; only a test
	// build has them); nil: none.
	Faults *faults.Faults
	// Reload, if set, re-reads this node's jobs on SIGHUP.
	Reload func() (specs []jobs.Spec, source string, err error)
	// API guards the public API and the dashboard (config's api section).
	API config.API
	// Notify is the SMTP server and dashboard base of notifications.
	Notify config.Notify
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
	// A release build has no faults, nor this text (Built is false).
	if faults.Built && o.Faults != nil {
		log.Warn("FAULT INJECTION ENABLED: this node misbehaves on purpose (FENCECRON_FAULTS); never use it in production", "faults", os.Getenv("FENCECRON_FAULTS"))
	}

	// Job tokens are signed with a key derived from the cluster secret
	// (during a roll, the previous one's until every member accepts the
	// new: election tells the signer); without a secret the store refuses
	// every write over HTTP.
	var signer *fencedstore.Signer
	useNewSecret := func(bool) {}
	if len(o.Secret) > 0 {
		var err error
		if signer, err = fencedstore.NewSigner(o.Secret, o.PreviousSecret); err != nil {
			return err
		}
		useNewSecret = signer.UseNewSecret
	}

	bind := o.Bind
	if bind == "" {
		bind = election.DefaultBindAddr
	}
	advertise := o.Advertise
	if advertise == "" {
		advertise = bind
	}
	id, err := clustertls.Load(clustertls.Config{
		NodeName: o.ID, Secret: o.Secret, PreviousSecret: o.PreviousSecret,
		CAFile: o.ClusterTLS.CAFile, CertFile: o.ClusterTLS.CertFile, KeyFile: o.ClusterTLS.KeyFile,
		Hosts: []string{bind, advertise},
	})
	if err != nil {
		return err
	}
	// Jobs verify the store with the cluster's CA: public, so 0644.
	caFile := filepath.Join(o.DataDir, "cluster-ca.pem")
	if err := writeFileAtomic(caFile, id.CAPEM(), 0o644); err != nil {
		return err
	}
	publicTLS, err := loadPublicTLS(o.PublicTLS)
	if err != nil {
		return err
	}

	store, maxBody, closeStore, err := openStore(o, signer, id)
	if err != nil {
		return err
	}
	closers = append(closers, closeStore)

	sm := fsm.NewFSM()
	sm.Logger = log
	tuning := faults.TuningOf(o.Faults)
	sm.MaxRuns, sm.MaxEvents = cmp.Or(tuning.HotRuns, fsm.DefaultMaxRuns), tuning.HotEvents
	// A server keeps the run history in its data dir, fed by the FSM, so
	// it must be open before Raft restores a snapshot or replays the log
	// into the FSM, and close after Raft has stopped.
	var hist *historydb.Store
	if o.Server {
		hist = &historydb.Store{Path: filepath.Join(o.DataDir, "history.db"), Default: o.History, Logger: log,
			Retention: func(job string) jobs.History { s, _ := sm.Spec(job); return s.History }}
		sm.History = hist
	}
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
		PreviousSecret:  o.PreviousSecret,
		UseNewSecret:    useNewSecret,
		TLS:             id,
		Profile:         o.Profile,
		ReapAfter:       o.ReapAfter,
		Meta:            election.Meta{Tags: o.Tags, ConfigHash: o.ConfigHash, NoJobs: !o.RunJobs, ConfirmsStarts: true},
		// Release builds: Raft's defaults (the tuning is zero).
		SnapshotThreshold: tuning.SnapshotThreshold,
		TrailingLogs:      tuning.TrailingLogs,
		SnapshotInterval:  time.Duration(tuning.SnapshotIntervalMS) * time.Millisecond,
		Logger:            log,
	}, sm)
	// The transport between nodes: this node's calls to the leader, to
	// workers and, for its history's backfill, to the other servers.
	peers := &rpc.Client{Self: o.ID, TLS: id, NameAt: node.NameAt, LeaderHTTP: node.LeaderHTTP, NodeHTTP: node.MemberHTTP, Servers: node.ServerHTTPs, Faults: o.Faults}
	if hist != nil {
		hist.Peers, hist.Fetch = node.ServerHTTPs, peers.HistoryRange
		if err := hist.Open(); err != nil {
			return err
		}
		closers = append(closers, hist.Close)
	}
	if err := node.Open(); err != nil {
		return err
	}
	closers = append(closers, node.Close)

	sched := scheduler.New(node, sm)
	sched.Logger = log
	// The node's wall clock (a test build may move it: ClockOf).
	clock := faults.ClockOf(o.Faults)
	sched.Clock = clock
	skew := newSkewMonitor(o, clock, node, peers, sched, log)
	sched.InitialJobs, sched.InitialSource = o.InitialJobs, o.InitialSource
	sched.ReplaceJobs = o.ReplaceJobs
	// The leader checks job sets sent through the API as the config
	// parser checks the file (jobs.CheckSet): output keys by the store's
	// rules, outputs within its body cap.
	sched.MaxBodyBytes = maxBody
	// The transport answers other nodes' calls too (as the leader,
	// through Local, which never forwards).
	sched.Forwarder, sched.Dispatcher = peers, peers
	sched.Notify = notifyConfig(o, advertise)

	nodeMetrics := metrics.New()
	stopRetention, err := startRetention(o, store, nodeMetrics, log)
	if err != nil {
		return err
	}
	if stopRetention != nil {
		closers = append(closers, stopRetention)
	}
	if o.Store.Backend != config.BackendRemote {
		// Count this node's store's decisions, whoever asks for them.
		store = nodeMetrics.CountDecisions(store)
	}
	// A forced release raises its job's floor in this node's store (the
	// one the worker writes to, so the same for every node).
	sched.Store = store
	wk := &worker.Worker{
		ID: o.ID, Store: store, Leader: sched,
		Grace: 2 * time.Second, Faults: o.Faults, DropEnv: o.DropEnv, JobNice: o.JobNice, Logger: log,
		Observer: nodeMetrics, StoreCA: caFile, Clock: clock,
	}
	if signer != nil {
		wk.TokenText = tokenText(signer, log)
	}
	peers.Local = wk
	internal := &rpc.Server{Leader: sched.Local(), Worker: wk, Logger: log, Clock: clock}
	srv := &web.Server{
		Addr: netJoin(bind, o.HTTPPort), Cluster: node, State: sm, Scheduler: sched, Internal: internal,
		Store: store, TLS: id, PublicTLS: publicTLS, Logger: log,
		APIToken: o.API.Token, ReadOnly: o.API.ReadOnly, Metrics: nodeMetrics,
		AdvertiseHosts: []string{o.ID, advertise}, AllowedHosts: o.API.AllowedHosts, Limits: webLimits(o.API.Limits),
		Operator: &operator{node: node, fsm: sm, sched: sched, log: log},
	}
	// Only a node that serves the store takes writes over HTTP; every
	// node shows it. Its jobs are still handed this node's address
	// (FENCECRON_STORE): a job's publish then says which setting is
	// missing rather than fail somewhere else.
	storeAPI := &httpstore.Handler{Store: store, Signer: signer, MaxBodyBytes: maxBody, Logger: log,
		QuotaKeys: int64(o.Store.Quota.Keys), QuotaBytes: o.Store.Quota.Bytes}
	switch {
	case o.Store.Backend == config.BackendRemote:
		storeAPI.WritesOff = "this node's store is served by another node (store.backend: remote, store.url " + o.Store.URL + "): write there"
	case !o.Store.Serve:
		storeAPI.WritesOff = "this node does not serve its store (store.serve is false): set store.serve: true in its config to take writes from its jobs (`fencecron publish`) and from other nodes"
	}
	// The store's refusals of jobs' own publishes go to the ledger.
	refusals := &worker.NoteQueue{Leader: sched, Node: o.ID, Logger: log, Dropped: nodeMetrics.RefusalNoteDropped}
	if err := refusals.Open(); err != nil {
		return err
	}
	closers = append(closers, refusals.Close)
	storeAPI.OnRefused = refusalsTo(refusals)
	srv.StoreAPI = storeAPI
	// Running attempts' output comes from their workers.
	srv.Outputs = peers
	srv.Clock, srv.ClockSkew = clock, skew
	srv.Notifications = sched
	if err := nodeMetrics.WatchClockSkew(skew); err != nil {
		return err
	}
	if hist != nil {
		internal.History, srv.History = hist, hist
	}
	if err := srv.Open(); err != nil {
		return err
	}
	closers = append(closers, srv.Close)
	// Jobs publish through the node that serves the store, over TLS.
	wk.StoreAddr = "https://" + netJoin(advertise, srv.Port())
	if o.Store.Backend == config.BackendRemote {
		wk.StoreAddr = clusterURL(o.Store.URL)
	}
	if err := wk.Open(); err != nil {
		return err
	}
	closers = append(closers, wk.Close)
	// Only now may others dispatch here: advertise the HTTP address.
	node.UpdateMeta(func(m *election.Meta) { m.HTTPAddr = netJoin(advertise, srv.Port()) })
	if err := sched.Open(); err != nil {
		return err
	}
	closers = append(closers, sched.Close)
	if err := skew.Open(); err != nil {
		return err
	}
	closers = append(closers, skew.Close)

	links := "TLS 1.3, certificates from a CA derived from cluster.secret; gossip encrypted with a key derived from it"
	if !id.Derived() {
		links = "TLS 1.3, certificates of cluster.tls; gossip encrypted with a key derived from cluster.secret"
	}
	if len(o.PreviousSecret) > 0 {
		links += "; rolling from cluster.previous_secret, which is accepted too"
	}
	log.Info("dashboard at "+srv.URL()+"/", "node", o.ID, "raft", node.RaftAddr(), "gossip", node.GossipAddr(), "access", accessLine(bind, o.API), "links", links)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	applied, unsubscribe := sm.Subscribe()
	defer unsubscribe()
	setHash := sm.JobSetInfo().Hash
	release := time.NewTimer(time.Hour)
	release.Stop()
	defer release.Stop()
	for {
		select {
		case <-ctx.Done():
			handOver(log, node)
			log.Info("shutting down", "budget", shutdownBudget)
			return nil
		case <-hup:
			reload(ctx, log, o, node, sched)
		case <-applied:
			if h := sm.JobSetInfo().Hash; h != setHash {
				setHash = h
				// Once the request that carried the set has been answered
				// and its copies are garbage.
				release.Reset(releaseAfter)
			}
		case <-release.C:
			releaseMemory()
		}
	}
}

// handOverBudget bounds a planned stop's hand-over; past it the node
// stops anyway and the cluster elects a leader as after a crash.
const handOverBudget = 3 * time.Second

// handOver is the first step of a planned stop (SIGTERM, Ctrl-C): tell
// gossip this node is leaving and, if it leads, hand leadership to another
// server, so the cluster fires on at once instead of after an election
// timeout.
func handOver(log *slog.Logger, node *election.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), handOverBudget)
	defer cancel()
	start := time.Now()
	handed, err := node.HandOver(ctx)
	switch {
	case err != nil:
		log.Warn("planned stop: could not hand leadership over; the others will elect a leader", "err", err)
	case handed:
		log.Info("planned stop: handed leadership over", "took", time.Since(start).Round(time.Millisecond))
	}
}

// releaseAfter is how long after a new job set is applied its memory is
// handed back (releaseMemory).
const releaseAfter = 2 * time.Second

// releaseMemory hands the memory a new job set left behind back to the
// system. Replacing a set of 100,000 jobs passes several copies of it
// through the heap (the request, the Raft entry, the decoded set, the
// leader's queue) and then keeps one: without this the process would hold
// the peak, twice what it keeps, until the runtime's slow background
// return. A job set changes rarely, so one full collection then is cheap.
func releaseMemory() { debug.FreeOSMemory() }

// accessLine says who may read and who may change things through the
// public API of a node listening on bind with the api section a.
func accessLine(bind string, a config.API) string {
	reach := "anyone who can reach " + bind
	switch ip := net.ParseIP(bind); {
	case ip != nil && ip.IsLoopback():
		reach = "only this host (bound to " + bind + ")"
	case ip != nil && ip.IsUnspecified():
		reach = "anyone who can reach any of this host's addresses"
	}
	names := "loopback names, IP addresses, the node's name"
	if len(a.AllowedHosts) > 0 {
		names += " and api.allowed_hosts"
	}
	read := "read: " + reach + ", addressing it by " + names + " (plain HTTP)"
	switch {
	case a.ReadOnly:
		return read + "; change: nobody, read-only (api.read_only)"
	case a.Token != "":
		return read + "; change: token-protected, only with the API token (api.token, or a dashboard login)"
	}
	return read + "; change: loopback-only, no API token: clients on this host without one, nobody else (set api.token to allow other hosts)"
}

// webLimits is the config's api.limits for the web server; zero fields
// take web.DefaultLimits there.
func webLimits(l config.Limits) web.Limits {
	return web.Limits{
		ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout, WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout,
		MaxHeaderBytes: int(l.MaxHeaderBytes), MaxConnections: l.MaxConnections, MaxConnectionsPerClient: l.MaxConnectionsPerClient,
		MaxEventStreams: l.MaxEventStreams,
		EventHeartbeat:  l.EventHeartbeat,
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
func openStore(o nodeOptions, signer *fencedstore.Signer, id *clustertls.Identity) (fencedstore.Store, int64, func(context.Context) error, error) {
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
		if o.Store.KeepVersions > 0 {
			s.KeepVersions = o.Store.KeepVersions
		}
		if err := s.Open(); err != nil {
			return nil, 0, nil, err
		}
		return s, maxBody, func(context.Context) error { return s.Close() }, nil
	case config.BackendPostgres:
		s := postgres.New(o.Store.URL)
		s.MaxBodyBytes, s.HistoryRetention = maxBody, retention
		if o.Store.KeepVersions > 0 {
			s.KeepVersions = o.Store.KeepVersions
		}
		if err := s.Open(); err != nil {
			return nil, 0, nil, err
		}
		return s, maxBody, func(context.Context) error { return s.Close() }, nil
	case config.BackendRemote:
		if signer == nil {
			return nil, 0, nil, fmt.Errorf("store backend remote needs cluster.secret to sign tokens")
		}
		c := httpstore.NewClient(clusterURL(o.Store.URL), signer)
		c.HTTP = clusterHTTPClient(id)
		return c, maxBody, func(context.Context) error { c.HTTP.CloseIdleConnections(); return nil }, nil
	}
	return nil, 0, nil, fmt.Errorf("unknown store backend %q", o.Store.Backend)
}

// clusterURL is the URL nodes and jobs use for the store another node
// serves: always https, whatever scheme store.url was written with, because
// fence tokens and the store credential must not cross the network in the
// clear.
func clusterURL(u string) string {
	u = httpstore.NormalizeURL(u)
	if rest, ok := strings.CutPrefix(u, "http://"); ok {
		return "https://" + rest
	}
	return u
}

// clusterHTTPClient is an HTTP client of another node's API: TLS with this
// node's certificate, the server verified as a node of the cluster.
func clusterHTTPClient(id *clustertls.Identity) *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     id.HTTP2ClientConfig(""),
			TLSHandshakeTimeout: 10 * time.Second,
			// One connection per peer carries every call (HTTP2ClientConfig).
			ForceAttemptHTTP2:   true,
			HTTP2:               clustertls.HTTP2Health(),
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}

// loadPublicTLS reads api.tls's certificate; nil without one.
func loadPublicTLS(f config.TLSFiles) (*tls.Config, error) {
	if f.CertFile == "" && f.KeyFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("api.tls: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}, nil
}

// writeFileAtomic replaces path with data: a reader never sees half of it.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

package agent

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/atomicfile"
	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/telemetry"
	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/faults"
	"github.com/fencecron/fencecron/scheduler/fsm"
	historydb "github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/rpc"
	"github.com/fencecron/fencecron/scheduler/runtrace"
	"github.com/fencecron/fencecron/scheduler/worker"
	"github.com/fencecron/fencecron/web"
	"github.com/fencecron/fencecron/web/metrics"
)

// openDataDir creates the node's data directory.
func (n *node) openDataDir() error {
	if err := os.MkdirAll(n.cfg.Node.DataDir, 0o700); err != nil {
		return err
	}
	// A release build has no faults, nor this text (FaultsBuilt is false).
	if faults.Built && n.opt.Faults != nil {
		n.log.Warn("FAULT INJECTION ENABLED: this node misbehaves on purpose (FENCECRON_FAULTS); never use it in production", "faults", os.Getenv("FENCECRON_FAULTS"))
	}
	return nil
}

// openIdentity sets up what the node proves itself and signs with: the
// job token signer, the certificates of the links between nodes, and
// api.tls's.
func (n *node) openIdentity() error {
	c := n.cfg
	secret, previous := []byte(c.Cluster.Secret), []byte(c.Cluster.PreviousSecret)
	// Job tokens are signed with a key derived from the cluster secret
	// (during a roll, the previous one's until every member accepts the
	// new: election tells the signer); without a secret the store refuses
	// every write over HTTP.
	if len(secret) > 0 {
		var err error
		if n.signer, err = fencedstore.NewSigner(secret, previous); err != nil {
			return err
		}
	}
	n.bind = c.Node.Bind
	n.advertise = cmp.Or(c.Node.Advertise, n.bind)
	id, err := clustertls.Load(clustertls.Config{
		NodeName: c.Node.Name, Secret: secret, PreviousSecret: previous,
		CAFile: c.Cluster.TLS.CAFile, CertFile: c.Cluster.TLS.CertFile, KeyFile: c.Cluster.TLS.KeyFile,
		Hosts: []string{n.bind, n.advertise},
	})
	if err != nil {
		return err
	}
	n.id = id
	// Jobs verify the store with the cluster's CA: public, so 0644.
	n.caFile = filepath.Join(c.Node.DataDir, "cluster-ca.pem")
	if err := atomicfile.Write(n.caFile, id.CAPEM(), 0o644); err != nil {
		return err
	}
	n.publicTLS, err = loadPublicTLS(c.API.TLS)
	return err
}

// openRaft opens the replicated state: the FSM, a server's run history,
// Raft and gossip (election), and the transport to other nodes.
func (n *node) openRaft() error {
	c := n.cfg
	n.fsm = fsm.NewFSM()
	n.fsm.Logger = n.log
	tuning := faults.TuningOf(n.opt.Faults)
	n.fsm.MaxRuns, n.fsm.MaxEvents = cmp.Or(tuning.HotRuns, replicated.DefaultMaxRuns), tuning.HotEvents
	// A server keeps the run history in its data dir, fed by the FSM, so
	// it must be open before Raft restores a snapshot or replays the log
	// into the FSM, and close after Raft has stopped.
	if c.Node.Server {
		n.hist = &historydb.Store{Path: filepath.Join(c.Node.DataDir, "history.db"), Default: c.Cluster.History, Logger: n.log,
			Retention: func(job string) jobs.History { s, _ := n.fsm.Spec(job); return s.History }}
		n.fsm.History = n.hist
	}
	useNewSecret := func(bool) {}
	if n.signer != nil {
		useNewSecret = n.signer.UseNewSecret
	}
	n.raft = election.New(election.Config{
		NodeID:          c.Node.Name,
		DataDir:         c.Node.DataDir,
		BindAddr:        c.Node.Bind,
		AdvertiseAddr:   c.Node.Advertise,
		RaftPort:        c.Node.Ports.Raft,
		GossipPort:      c.Node.Ports.Gossip,
		Server:          c.Node.Server,
		BootstrapExpect: c.Node.BootstrapExpect,
		Join:            c.Node.Join,
		Secret:          []byte(c.Cluster.Secret),
		PreviousSecret:  []byte(c.Cluster.PreviousSecret),
		UseNewSecret:    useNewSecret,
		TLS:             n.id,
		Profile:         c.Cluster.Profile,
		ReapAfter:       c.Cluster.ReapAfter,
		Meta:            election.Meta{Tags: c.Node.Tags, ConfigHash: n.configHash(), NoJobs: !c.Node.RunJobs, ConfirmsStarts: true, PreStartLeases: true, MaxAttempts: c.Node.MaxAttempts},
		// Release builds: Raft's defaults (the tuning is zero).
		SnapshotThreshold: tuning.SnapshotThreshold,
		TrailingLogs:      tuning.TrailingLogs,
		SnapshotInterval:  time.Duration(tuning.SnapshotIntervalMS) * time.Millisecond,
		Logger:            n.log,
	}, n.fsm)
	// The transport between nodes: this node's calls to the leader, to
	// workers and, for its history's backfill, to the other servers.
	n.peers = &rpc.Client{Self: c.Node.Name, TLS: n.id, NameAt: n.raft.NameAt, LeaderHTTP: n.raft.LeaderHTTP, NodeHTTP: n.raft.MemberHTTP, Servers: n.raft.ServerHTTPs, Faults: n.opt.Faults}
	if n.hist != nil {
		n.hist.Peers, n.hist.Fetch = n.raft.ServerHTTPs, n.peers.HistoryRange
		if err := n.hist.Open(); err != nil {
			return err
		}
		n.closeWith("history", n.hist.Close)
	}
	if err := n.raft.Open(); err != nil {
		return err
	}
	n.closeWith("raft", n.raft.Close)
	return nil
}

// configHash is the hash of this node's own jobs, for drift reports; ""
// without any.
func (n *node) configHash() string {
	if n.opt.Jobs == nil {
		return ""
	}
	return jobs.HashSpecs(n.opt.Jobs.Specs)
}

// openTelemetry starts the trace export the telemetry section (or the
// OTEL_* environment) asks for; shutdown flushes it once the parts opened
// after it have stopped.
func (n *node) openTelemetry() error {
	tp, err := telemetry.Open(context.Background(), n.cfg.Telemetry, n.cfg.Node.Name)
	if err != nil || tp == nil {
		return err
	}
	n.traces = tp
	n.closeWith("trace export", tp.Shutdown)
	// From here on, every line about a run names its trace.
	n.log = slog.New(runtrace.LogHandler(n.log.Handler()))
	n.log.Info("tracing on: runs are exported over OTLP", "endpoint", n.cfg.Telemetry.OTLPEndpoint, "protocol", n.cfg.Telemetry.Protocol, "sample_ratio", n.cfg.Telemetry.SampleRatio)
	return nil
}

// runTracer is the tracer of runs: nil while tracing is off.
func (n *node) runTracer() *runtrace.Tracer {
	if n.traces == nil {
		return nil
	}
	return runtrace.New(n.traces)
}

// newScheduler builds the scheduler on the replicated state, with the
// node's clock and the monitor of its peers' clocks.
func (n *node) newScheduler() error {
	n.sched = scheduler.New(n.raft, n.fsm)
	n.sched.Logger = n.log
	n.sched.Tracer = n.runTracer()
	// The node's wall clock (a test build may move it: ClockOf).
	n.clock = faults.ClockOf(n.opt.Faults)
	n.sched.Clock = n.clock
	n.skew = newSkewMonitor(n.cfg.Node.Name, n.cfg.Cluster.MaxClockSkew, n.clock, n.raft, n.peers, n.sched, n.log)
	if j := n.opt.Jobs; j != nil {
		n.sched.InitialJobs, n.sched.InitialSource, n.sched.ReplaceJobs = j.Specs, j.Source, j.Replace
	}
	// The leader checks job sets sent through the API as the config
	// parser checks the file (jobs.CheckSet): output keys by the store's
	// rules, outputs within its body cap.
	n.sched.MaxBodyBytes = n.maxBody
	// The transport answers other nodes' calls too (as the leader,
	// through Local, which never forwards).
	n.sched.Forwarder, n.sched.Dispatcher = n.peers, n.peers
	n.sched.Notify = notifyConfig(n.cfg, n.advertise)
	return nil
}

// newWorker builds the worker that runs this node's attempts, with the
// store's retention and the node's metrics.
func (n *node) newWorker() error {
	c := n.cfg
	n.metrics = metrics.New()
	stopRetention, err := startRetention(c.Store, n.store, n.metrics, n.log)
	if err != nil {
		return err
	}
	if stopRetention != nil {
		n.closeWith("store retention", stopRetention)
	}
	if c.Store.Backend != config.BackendRemote {
		// Count this node's store's decisions, whoever asks for them.
		n.store = n.metrics.CountDecisions(n.store)
	}
	// A forced release raises its job's floor in this node's store (the
	// one the worker writes to, so the same for every node).
	n.sched.Store = n.store
	n.worker = &worker.Worker{
		ID: c.Node.Name, Store: n.store, Leader: n.sched,
		Grace: 2 * time.Second, Faults: n.opt.Faults, DropEnv: c.EnvUsed(), JobNice: c.Node.JobNice, Logger: n.log,
		Observer: n.metrics, StoreCA: n.caFile, Clock: n.clock,
	}
	n.worker.Tracer = n.runTracer()
	if t := c.Telemetry; n.traces != nil && t.OTLPEndpoint != "" {
		n.worker.TraceEnv = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + t.OTLPEndpoint}
		if t.Protocol != "" {
			n.worker.TraceEnv = append(n.worker.TraceEnv, "OTEL_EXPORTER_OTLP_PROTOCOL="+t.Protocol)
		}
	}
	if n.signer != nil {
		n.worker.TokenText = TokenText(n.signer, n.log)
	}
	n.peers.Local = n.worker
	return nil
}

// newWeb builds the HTTP server: the public API and dashboard, the
// internal API between nodes, and the store's API.
func (n *node) newWeb() error {
	c := n.cfg
	n.internal = &rpc.Server{Leader: n.sched.Local(), Worker: n.worker, Logger: n.log, Clock: n.clock}
	n.srv = &web.Server{
		Addr: netJoin(n.bind, c.Node.Ports.HTTP), Cluster: n.raft, State: n.fsm, Scheduler: n.sched, Internal: n.internal,
		Store: n.store, TLS: n.id, PublicTLS: n.publicTLS, Logger: n.log,
		APIToken: c.API.Token, ReadOnly: c.API.ReadOnly, Metrics: n.metrics,
		ACL: c.ACL.Enabled, ACLState: n.fsm.ACL,
		AdvertiseHosts: []string{c.Node.Name, n.advertise}, AllowedHosts: c.API.AllowedHosts, Limits: webLimits(c.API.Limits),
		Operator: &operator{node: n.raft, fsm: n.fsm, sched: n.sched, log: n.log},
	}
	if n.signer != nil {
		// A node's own store calls carry the store credential.
		n.srv.NodeCredential = n.signer.Credential()
	}
	// Only a node that serves the store takes writes over HTTP; every
	// node shows it. Its jobs are still handed this node's address
	// (FENCECRON_STORE): a job's publish then says which setting is
	// missing rather than fail somewhere else.
	storeAPI := &httpstore.Handler{Store: n.store, Signer: n.signer, MaxBodyBytes: n.maxBody, Logger: n.log,
		QuotaKeys: int64(c.Store.Quota.Keys), QuotaBytes: c.Store.Quota.Bytes}
	if c.Store.Backend == config.BackendRemote {
		n.srv.StoreRemote = c.Store.URL
	}
	if n.traces != nil {
		storeAPI.Tracer = n.traces.Tracer(runtrace.Name)
	}
	switch {
	case c.Store.Backend == config.BackendRemote:
		storeAPI.WritesOff = "this node's store is served by another node (store.backend: remote, store.url " + c.Store.URL + "): write there"
	case !c.Store.Serve:
		storeAPI.WritesOff = "this node does not serve its store (store.serve is false): set store.serve: true in its config to take writes from its jobs (`fencecron publish`) and from other nodes"
	}
	// The store's refusals of jobs' own publishes go to the ledger.
	refusals := &worker.NoteQueue{Leader: n.sched, Node: c.Node.Name, Logger: n.log, Dropped: n.metrics.RefusalNoteDropped}
	if err := refusals.Open(); err != nil {
		return err
	}
	n.closeWith("refusal log", refusals.Close)
	storeAPI.OnRefused = refusalsTo(refusals)
	n.srv.StoreAPI = storeAPI
	// Running attempts' output comes from their workers.
	n.srv.Outputs = n.peers
	n.srv.Clock, n.srv.ClockSkew = n.clock, n.skew
	n.srv.Notifications = n.sched
	if err := n.metrics.WatchClockSkew(n.skew); err != nil {
		return err
	}
	if n.hist != nil {
		n.internal.History, n.srv.History = n.hist, n.hist
	}
	return nil
}

// start serves HTTP, then starts the worker, the scheduler and the clock
// monitor: only once the node answers may others dispatch to it.
func (n *node) start() error {
	if err := n.srv.Open(); err != nil {
		return err
	}
	n.closeWith("web server", n.srv.Close)
	// Jobs publish through the node that serves the store, over TLS.
	n.worker.StoreAddr = "https://" + netJoin(n.advertise, n.srv.Port())
	if n.cfg.Store.Backend == config.BackendRemote {
		n.worker.StoreAddr = clusterURL(n.cfg.Store.URL)
	}
	if err := n.worker.Open(); err != nil {
		return err
	}
	n.closeWith("worker", n.worker.Close)
	// Only now may others dispatch here: advertise the HTTP address.
	n.raft.UpdateMeta(func(m *election.Meta) { m.HTTPAddr = netJoin(n.advertise, n.srv.Port()) })
	if err := n.sched.Open(); err != nil {
		return err
	}
	n.closeWith("scheduler", n.sched.Close)
	if err := n.skew.Open(); err != nil {
		return err
	}
	n.closeWith("clock skew monitor", n.skew.Close)
	return nil
}

// logReady logs where the node is and who may reach it.
func (n *node) logReady() {
	links := "TLS 1.3, certificates from a CA derived from cluster.secret; gossip encrypted with a key derived from it"
	if !n.id.Derived() {
		links = "TLS 1.3, certificates of cluster.tls; gossip encrypted with a key derived from cluster.secret"
	}
	if len(n.cfg.Cluster.PreviousSecret) > 0 {
		links += "; rolling from cluster.previous_secret, which is accepted too"
	}
	n.log.Info("dashboard at "+n.srv.URL()+"/", "node", n.cfg.Node.Name, "raft", n.raft.RaftAddr(), "gossip", n.raft.GossipAddr(), "access", accessLine(n.bind, n.cfg.API), "links", links)
}

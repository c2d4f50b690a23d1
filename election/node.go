// Package election is the membership and coordination plane: memberlist
// gossip for who is alive, and a Raft group (raft-boltdb/v2 log, file
// snapshots, TCP transport) that replicates whatever FSM it is given and
// reports leadership. It knows nothing about jobs.
package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Sentinel errors.
var (
	ErrNotLeader = errors.New("not the leader")
	ErrClosed    = errors.New("node closed")
)

// Roles a node advertises in gossip.
const (
	RoleServer = "server"
	RoleWorker = "worker"
)

// Meta is what a node tells the others about itself through gossip.
type Meta struct {
	Role       string            `json:"role"`
	Tags       map[string]string `json:"tags,omitempty"`
	RaftAddr   string            `json:"raft,omitempty"`
	HTTPAddr   string            `json:"http,omitempty"`
	ConfigHash string            `json:"config_hash,omitempty"`
}

// Member is one node as gossip sees it.
type Member struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"` // alive, suspect, dead, left
	Meta  Meta   `json:"meta"`
}

// Config configures a Node.
type Config struct {
	// NodeID names the node; unique in the cluster.
	NodeID string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string
	// BindAddr is the IP both Raft and gossip listen on.
	BindAddr string
	// RaftPort and GossipPort are the listen ports.
	RaftPort, GossipPort int
	// Bootstrap makes a node with no Raft state start a one-server cluster
	// of itself.
	Bootstrap bool
	// Join lists gossip addresses of peers.
	Join []string
	// Meta is advertised to peers; RaftAddr is filled in by Open.
	Meta Meta
	// Logger receives the node's logs, raft's and memberlist's included.
	Logger *slog.Logger
}

// Node is one member of the cluster: a memberlist and, for servers, a Raft
// replica of an FSM.
type Node struct {
	cfg Config
	fsm raft.FSM
	log *slog.Logger

	raft      *raft.Raft
	transport *raft.NetworkTransport
	logStore  *raftboltdb.BoltStore
	ml        *memberlist.Memberlist

	notifyCh chan bool     // raft's blocking leadership notifications
	changed  chan struct{} // ours: coalesced, never blocks raft
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

// New returns a node that replicates fsm; call Open to start it.
func New(cfg Config, fsm raft.FSM) *Node {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1"
	}
	return &Node{cfg: cfg, fsm: fsm, log: cfg.Logger}
}

// Open starts Raft and gossip. On error, everything it started is stopped.
func (n *Node) Open() (err error) {
	if n.cfg.NodeID == "" {
		return errors.New("node id is required")
	}
	n.done = make(chan struct{})
	n.changed = make(chan struct{}, 1)
	n.notifyCh = make(chan bool, 1)
	defer func() {
		if err != nil {
			n.shutdown()
		}
	}()
	if err := n.openRaft(); err != nil {
		return err
	}
	if err := n.openGossip(); err != nil {
		return err
	}
	n.wg.Add(1)
	go n.watchLeadership()
	return nil
}

func (n *Node) openRaft() error {
	dir := filepath.Join(n.cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.NodeID)
	rc.Logger = hclogTo(n.log, "raft")
	rc.NotifyCh = n.notifyCh

	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("open raft log: %w", err)
	}
	n.logStore = store
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclogTo(n.log, "raft-snapshot"))
	if err != nil {
		return fmt.Errorf("open raft snapshots: %w", err)
	}
	bind := net.JoinHostPort(n.cfg.BindAddr, strconv.Itoa(n.cfg.RaftPort))
	advertise, err := net.ResolveTCPAddr("tcp", bind)
	if err != nil {
		return err
	}
	if n.cfg.RaftPort == 0 {
		advertise = nil // let the transport report the port it got
	}
	trans, err := raft.NewTCPTransportWithLogger(bind, advertise, 3, 10*time.Second, hclogTo(n.log, "raft-net"))
	if err != nil {
		return fmt.Errorf("raft transport on %s: %w", bind, err)
	}
	n.transport = trans
	n.cfg.Meta.RaftAddr = string(trans.LocalAddr())

	if n.cfg.Bootstrap {
		has, err := raft.HasExistingState(store, store, snaps)
		if err != nil {
			return err
		}
		if !has {
			conf := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}}
			if err := raft.BootstrapCluster(rc, store, store, snaps, trans, conf); err != nil {
				return fmt.Errorf("bootstrap: %w", err)
			}
			n.log.Info("bootstrapped a new cluster", "node", n.cfg.NodeID, "raft", trans.LocalAddr())
		}
	}
	r, err := raft.NewRaft(rc, n.fsm, store, store, snaps, trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	return nil
}

func (n *Node) openGossip() error {
	mc := memberlist.DefaultLANConfig()
	mc.Name = n.cfg.NodeID
	mc.BindAddr = n.cfg.BindAddr
	mc.BindPort = n.cfg.GossipPort
	mc.AdvertisePort = n.cfg.GossipPort
	mc.Logger = log.New(lineWriter(n.log, "memberlist"), "", 0)
	mc.Delegate = &delegate{node: n}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("start gossip on %s:%d: %w", n.cfg.BindAddr, n.cfg.GossipPort, err)
	}
	n.ml = ml
	if len(n.cfg.Join) > 0 {
		if _, err := ml.Join(n.cfg.Join); err != nil {
			n.log.Warn("gossip join failed", "seeds", n.cfg.Join, "err", err)
		}
	}
	return nil
}

// watchLeadership drains raft's leadership notifications (raft blocks until
// they are read) into a coalescing channel the scheduler can read at its
// own pace.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	for {
		select {
		case leader := <-n.notifyCh:
			n.log.Info("leadership changed", "leader", leader, "node", n.cfg.NodeID)
			select {
			case n.changed <- struct{}{}:
			default:
			}
		case <-n.done:
			return
		}
	}
}

// LeadershipChanged is signalled, coalesced, whenever this node gains or
// loses leadership. Read IsLeader for the current state: a signal says only
// that it may have changed.
func (n *Node) LeadershipChanged() <-chan struct{} { return n.changed }

// IsLeader reports whether this node is the Raft leader right now.
func (n *Node) IsLeader() bool { return n.raft != nil && n.raft.State() == raft.Leader }

// Leader returns the id and Raft address of the leader this node knows of,
// or empty strings.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// State returns this node's Raft state: Leader, Follower, Candidate, ...
func (n *Node) State() string { return n.raft.State().String() }

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// RaftAddr returns the address Raft listens on.
func (n *Node) RaftAddr() string { return string(n.transport.LocalAddr()) }

// GossipAddr returns the address gossip listens on.
func (n *Node) GossipAddr() string { return n.ml.LocalNode().Address() }

// Apply replicates cmd and returns what the FSM's Apply returned for it. It
// fails with ErrNotLeader on a follower. raft.ErrLeadershipLost means the
// outcome is unknown: the entry may still commit.
func (n *Node) Apply(ctx context.Context, cmd []byte) (any, error) {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	f := n.raft.Apply(cmd, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return nil, ErrNotLeader
		}
		return nil, err
	}
	return f.Response(), nil
}

// Barrier waits until every entry committed before it has been applied to
// the FSM on this leader.
func (n *Node) Barrier(ctx context.Context) error {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	return n.raft.Barrier(timeout).Error()
}

// Members returns the nodes gossip knows, this one included.
func (n *Node) Members() []Member {
	var out []Member
	for _, m := range n.ml.Members() {
		var meta Meta
		_ = json.Unmarshal(m.Meta, &meta)
		out = append(out, Member{Name: m.Name, Addr: m.Address(), State: stateName(m.State), Meta: meta})
	}
	return out
}

// Stats returns raft's counters.
func (n *Node) Stats() map[string]string { return n.raft.Stats() }

// Close leaves gossip, shuts Raft down and closes the log store.
func (n *Node) Close(ctx context.Context) error {
	var err error
	n.once.Do(func() {
		if n.ml != nil {
			if e := n.ml.Leave(time.Second); e != nil {
				n.log.Warn("gossip leave", "err", e)
			}
		}
		err = n.shutdown()
	})
	return err
}

func (n *Node) shutdown() error {
	var errs []error
	if n.done != nil {
		select {
		case <-n.done:
		default:
			close(n.done)
		}
	}
	if n.ml != nil {
		errs = append(errs, n.ml.Shutdown())
	}
	if n.raft != nil {
		errs = append(errs, n.raft.Shutdown().Error())
	} else if n.transport != nil {
		errs = append(errs, n.transport.Close())
	}
	if n.logStore != nil {
		errs = append(errs, n.logStore.Close())
	}
	n.wg.Wait()
	return errors.Join(errs...)
}

type delegate struct{ node *Node }

func (d *delegate) NodeMeta(limit int) []byte {
	b, _ := json.Marshal(d.node.cfg.Meta)
	if len(b) > limit {
		d.node.log.Error("gossip metadata too large", "bytes", len(b), "limit", limit)
		return nil
	}
	return b
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

func stateName(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return "unknown"
}

// hclogTo sends a hashicorp library's logs through slog.
func hclogTo(l *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:        name,
		Level:       hclog.Info,
		Output:      lineWriter(l, name),
		DisableTime: true,
	})
}

// lineWriter returns a writer that logs each line written to it. hclog and
// the standard logger write whole lines per call, so no buffering is needed.
func lineWriter(l *slog.Logger, component string) io.Writer {
	return slogWriter{l: l, component: component}
}

type slogWriter struct {
	l         *slog.Logger
	component string
}

func (w slogWriter) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimRight(string(p), "\n"), "\n") {
		level := slog.LevelInfo
		switch {
		case strings.Contains(line, "[ERR"):
			level = slog.LevelError
		case strings.Contains(line, "[WARN"):
			level = slog.LevelWarn
		case strings.Contains(line, "[DEBUG"), strings.Contains(line, "[TRACE"):
			level = slog.LevelDebug
		}
		// Drop hclog's "[INFO]  raft: " prefix: slog says both already.
		if i := strings.Index(line, "]"); strings.HasPrefix(line, "[") && i > 0 {
			line = line[i+1:]
		}
		line = strings.TrimSpace(line)
		line = strings.TrimPrefix(line, w.component+": ")
		w.l.Log(context.Background(), level, line, "component", w.component)
	}
	return len(p), nil
}

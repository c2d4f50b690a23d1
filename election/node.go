// Package election is the membership and coordination plane: memberlist
// gossip for who is alive, and a Raft group (raft-boltdb/v2 log, file
// snapshots, TCP transport) that replicates whatever FSM it is given,
// bootstraps itself once enough servers see each other, keeps its voter
// set in step with gossip, and reports leadership. It knows nothing about
// jobs.
package election

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/fencecron/fencecron/election/clustertls"
)

// Sentinel errors.
var (
	ErrNotLeader = errors.New("not the leader")
	ErrNoLeader  = errors.New("no leader known")
	ErrClosed    = errors.New("node closed")
	// ErrPeerAlive refuses to remove a server gossip still sees alive:
	// the leader would add it back at once.
	ErrPeerAlive = errors.New("server is alive in gossip")
	// ErrNoSuchPeer is a server the Raft configuration does not hold.
	ErrNoSuchPeer = errors.New("no such server in the raft configuration")
)

// Roles a node advertises in gossip.
const (
	RoleServer = "server"
	RoleWorker = "worker"
)

// logCacheEntries is how many of the newest Raft entries a server keeps
// in memory (raft.LogCache). Most are a few hundred bytes; a job set's
// entry stays until that many newer ones have been written.
const logCacheEntries = 256

// Defaults a zero Config field takes, and the defaults of the config
// file's node.bind and cluster.reap_after.
const (
	DefaultBindAddr  = "127.0.0.1"
	DefaultReapAfter = 72 * time.Hour
)

// Config configures a Node. Zero values take the defaults noted.
type Config struct {
	// NodeID names the node; unique in the cluster.
	NodeID string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string
	// BindAddr is the IP Raft and gossip listen on (default
	// DefaultBindAddr); AdvertiseAddr the one peers use (default
	// BindAddr).
	BindAddr, AdvertiseAddr string
	// RaftPort and GossipPort are the listen ports; 0 picks a free one.
	RaftPort, GossipPort int
	// Server makes the node a Raft voter; a worker only gossips.
	Server bool
	// BootstrapExpect is how many servers must see each other in gossip
	// before the cluster bootstraps itself, once. 1 starts a one-server
	// cluster at once; 0 never bootstraps (join an existing cluster).
	BootstrapExpect int
	// Join lists gossip addresses of peers; Open retries until one answers.
	Join []string
	// Secret encrypts gossip with a key derived from it. PreviousSecret,
	// during a roll to a new secret, is accepted too (see secretLoop).
	Secret, PreviousSecret []byte
	// TLS is the node's identity on the Raft port: required for a server.
	TLS *clustertls.Identity
	// UseNewSecret, if set, is told which secret the node should sign and
	// encrypt with during a roll: the new one only once every member
	// holds it (see secretLoop).
	UseNewSecret func(bool)
	// Profile selects timeouts: ProfileDefault or ProfileFast.
	Profile string
	// ReapAfter is how long a server may be gone from gossip before the
	// leader removes it from the voters (default DefaultReapAfter).
	// Removal never takes the voter count below BootstrapExpect.
	ReapAfter time.Duration
	// SnapshotThreshold, SnapshotInterval and TrailingLogs tune Raft's
	// snapshots and log compaction; zero: Raft's defaults. Tests shrink
	// them so that a lagging server must install a snapshot.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// Meta is advertised to peers; Role, RaftAddr and Expect are filled in.
	Meta Meta
	// Logger receives the node's logs, raft's and memberlist's included.
	Logger *slog.Logger

	// wrapLogStore lets tests put a faulty disk under Raft.
	wrapLogStore func(raft.LogStore) raft.LogStore
	// timeouts, if set, replaces Profile's (tests).
	timeouts *profile
}

// Node is one member of the cluster.
type Node struct {
	cfg     Config
	fsm     raft.FSM
	log     *slog.Logger
	profile profile

	raft       *raft.Raft
	transport  *pipelineTransport
	stream     *tlsStream
	boltStore  *raftboltdb.BoltStore
	ml         *memberlist.Memberlist
	keyring    *memberlist.Keyring
	gossipKeys gossipKeys
	// gossipAddr is read once at Open: LocalNode's fields are rewritten by
	// metadata updates.
	gossipAddr string
	members    *memberTable
	triage     *logTriage

	metaMu    sync.Mutex
	meta      Meta
	metaDirty chan struct{}

	// joined is closed once gossip has joined a seed (at once without
	// seeds): only then does the member table show the whole cluster.
	joined     chan struct{}
	joinedOnce sync.Once

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
		cfg.BindAddr = DefaultBindAddr
	}
	if cfg.AdvertiseAddr == "" {
		cfg.AdvertiseAddr = cfg.BindAddr
	}
	if cfg.ReapAfter == 0 {
		cfg.ReapAfter = DefaultReapAfter
	}
	return &Node{cfg: cfg, fsm: fsm, log: cfg.Logger.With("node", cfg.NodeID)}
}

// Open starts Raft (servers only) and gossip, then the background loops:
// joining seeds, bootstrapping, and (as leader) reconciling voters. On
// error, everything it started is stopped.
func (n *Node) Open() (err error) {
	if n.cfg.NodeID == "" {
		return errors.New("node id is required")
	}
	p, err := profileNamed(n.cfg.Profile)
	if err != nil {
		return err
	}
	if n.cfg.timeouts != nil {
		p = *n.cfg.timeouts
	}
	n.profile = p
	n.done = make(chan struct{})
	n.changed = make(chan struct{}, 1)
	n.joined = make(chan struct{})
	n.notifyCh = make(chan bool, 1)
	n.metaDirty = make(chan struct{}, 1)
	n.members = newMemberTable(n.cfg.NodeID)
	n.triage = newLogTriage(n.log, n.members)
	n.meta = n.cfg.Meta
	n.meta.Secrets = nil
	for _, sec := range [][]byte{n.cfg.Secret, n.cfg.PreviousSecret} {
		if len(sec) > 0 {
			n.meta.Secrets = append(n.meta.Secrets, clustertls.Fingerprint(sec))
		}
	}
	n.meta.Role = RoleWorker
	if n.cfg.Server {
		n.meta.Role = RoleServer
		n.meta.Expect = n.cfg.BootstrapExpect
	}
	defer func() {
		if err != nil {
			n.shutdown()
		}
	}()
	if n.cfg.Server {
		if err := n.openRaft(); err != nil {
			return err
		}
	}
	if err := n.openGossip(); err != nil {
		return err
	}
	n.wg.Add(3)
	go n.joinLoop()
	go n.metaLoop()
	go n.secretLoop()
	if n.cfg.Server {
		n.wg.Add(4)
		go n.watchLeadership()
		go n.bootstrapLoop()
		go n.reconcileLoop()
		go n.watchCrashedLeader()
	}
	return nil
}

func (n *Node) openRaft() error {
	dir := filepath.Join(n.cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.NodeID)
	rc.Logger = n.triage.hclog("raft")
	rc.NotifyCh = n.notifyCh
	n.profile.applyRaft(rc)
	if n.cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = n.cfg.SnapshotThreshold
	}
	if n.cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = n.cfg.SnapshotInterval
	}
	if n.cfg.TrailingLogs > 0 {
		rc.TrailingLogs = n.cfg.TrailingLogs
	}

	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("open raft log: %w", err)
	}
	n.boltStore = store
	var logs raft.LogStore = store
	if n.cfg.wrapLogStore != nil {
		logs = n.cfg.wrapLogStore(logs)
	}
	logs = newTimeoutLogStore(logs, n.profile.logStoreTimeout, n.log)
	// Raft reads back the entries it just wrote: to send them to each
	// follower, to apply them, and, for every AppendEntries, the entry
	// before them for its term. From bolt each read decodes and copies
	// the whole entry; a job set's is tens of MiB, and a leader spent
	// seconds of CPU re-reading it. The newest entries are kept in
	// memory instead, as Consul does.
	if logs, err = raft.NewLogCache(logCacheEntries, logs); err != nil {
		return fmt.Errorf("raft log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, n.triage.hclog("raft-snapshot"))
	if err != nil {
		return fmt.Errorf("open raft snapshots: %w", err)
	}
	if n.cfg.TLS == nil {
		return errors.New("a server needs its cluster TLS identity: Raft never runs unauthenticated")
	}
	bind := net.JoinHostPort(n.cfg.BindAddr, strconv.Itoa(n.cfg.RaftPort))
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return fmt.Errorf("raft transport on %s: %w", bind, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	advertise, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(n.cfg.AdvertiseAddr, strconv.Itoa(port)))
	if err == nil && (advertise.IP == nil || advertise.IP.IsUnspecified()) {
		err = fmt.Errorf("raft: %s is not an address peers can dial: set the advertise address", advertise)
	}
	if err != nil {
		ln.Close()
		return err
	}
	stream := newTLSStream(ln, advertise, n.cfg.TLS, n.members.nameAtRaftAddr, n.log)
	trans := newPipelineTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: 10 * time.Second, Logger: n.triage.hclog("raft-net"),
	}))
	n.transport, n.stream = trans, stream
	n.meta.RaftAddr = string(trans.LocalAddr())

	has, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return err
	}
	n.meta.HasState = has
	r, err := raft.NewRaft(rc, n.fsm, logs, store, snaps, trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	return nil
}

// watchLeadership drains raft's leadership notifications (raft blocks until
// they are read) into a coalescing channel the scheduler reads at its own
// pace.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	for {
		select {
		case leader := <-n.notifyCh:
			term := n.raft.CurrentTerm()
			if leader {
				n.log.Info("gained leadership", "term", term)
			} else {
				n.log.Info("lost leadership", "term", term)
			}
			n.UpdateMeta(func(m *Meta) { m.Leading, m.Term = leader, term })
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

// TransferLeadership asks Raft to hand leadership to another voter (a
// node whose replicated state machine cannot go on, such as one halted at
// a log entry of a newer format, must not lead). It waits for the
// transfer's outcome.
func (n *Node) TransferLeadership() error {
	if n.raft == nil {
		return errors.New("not a server")
	}
	// Raft ends a transfer that does not finish in an election timeout;
	// await stops waiting when the node closes.
	return n.await(context.Background(), n.raft.LeadershipTransfer())
}

// Leader returns the id and Raft address of the leader this node knows of,
// or empty strings.
func (n *Node) Leader() (id, addr string) {
	if n.raft == nil {
		// A worker learns the leader from the servers' gossip.
		return n.members.leaderHint()
	}
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// LeaderHTTP returns the HTTP address of the current leader, from its
// gossip metadata.
func (n *Node) LeaderHTTP() (string, error) {
	id, _ := n.Leader()
	if id == "" {
		return "", ErrNoLeader
	}
	m, ok := n.members.get(id)
	if !ok || m.Meta.HTTPAddr == "" {
		return "", fmt.Errorf("leader %s: %w: no HTTP address in gossip", id, ErrNoLeader)
	}
	return m.Meta.HTTPAddr, nil
}

// MemberHTTP returns a member's HTTP address from its gossip metadata.
func (n *Node) MemberHTTP(name string) (string, error) {
	m, ok := n.members.get(name)
	if !ok || m.Meta.HTTPAddr == "" {
		return "", fmt.Errorf("node %s: no HTTP address in gossip", name)
	}
	if m.State != "alive" {
		return "", notAlive{name: name, state: m.State}
	}
	return m.Meta.HTTPAddr, nil
}

// ErrNotAlive is why a member is not called: gossip says it is suspect,
// dead or has left (not that gossip has not heard of it).
var ErrNotAlive = errors.New("not alive in gossip")

// notAlive is ErrNotAlive for one member, naming its state.
type notAlive struct{ name, state string }

func (e notAlive) Error() string        { return fmt.Sprintf("node %s is %s in gossip", e.name, e.state) }
func (e notAlive) Is(target error) bool { return target == ErrNotAlive }

// NameAt returns the name of the member gossip says serves HTTP at addr
// (host:port), or "" if none or several do.
func (n *Node) NameAt(addr string) string {
	return n.members.nameWhere(func(m Meta) bool { return m.HTTPAddr == addr })
}

// ServerHTTPs returns the HTTP addresses of the alive servers gossip
// knows, this node excluded.
func (n *Node) ServerHTTPs() []string {
	var out []string
	for _, m := range n.members.list() {
		if m.Name != n.cfg.NodeID && m.State == "alive" && m.Meta.Role == RoleServer && m.Meta.HTTPAddr != "" {
			out = append(out, m.Meta.HTTPAddr)
		}
	}
	return out
}

// State returns this node's Raft state (Leader, Follower, Candidate,
// Shutdown), or "Worker" for a node that does not vote.
func (n *Node) State() string {
	if n.raft == nil {
		return "Worker"
	}
	return n.raft.State().String()
}

// NoLeaderReason says why this node may know no leader ("" when it knows
// one, or knows no reason): what `fencecron status` prints under
// "leader (none)".
func (n *Node) NoLeaderReason() string {
	if id, _ := n.Leader(); id != "" {
		return ""
	}
	if r := n.triage.noLeaderReason(); r != "" {
		return r
	}
	if !n.cfg.Server {
		return "no server in gossip says it leads: is any server running, and in this node's node.join?"
	}
	var seen []string
	for _, m := range n.members.list() {
		if m.State == "alive" && m.Meta.Role == RoleServer {
			seen = append(seen, m.Name)
		}
	}
	n.metaMu.Lock()
	bootstrapped := n.meta.HasState
	n.metaMu.Unlock()
	if expect := n.cfg.BootstrapExpect; expect > 0 && len(seen) < expect && !bootstrapped {
		return fmt.Sprintf("waiting for %d servers (bootstrap_expect) to see each other in gossip; this node sees %d: %s", expect, len(seen), strings.Join(seen, ", "))
	}
	return "an election is under way, or the servers cannot reach each other's Raft ports"
}

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// RaftAddr returns the address Raft listens on ("" on a worker).
func (n *Node) RaftAddr() string {
	if n.transport == nil {
		return ""
	}
	return string(n.transport.LocalAddr())
}

// GossipAddr returns the address gossip listens on.
func (n *Node) GossipAddr() string { return n.gossipAddr }

// Apply replicates cmd and returns what the FSM's Apply returned for it. It
// fails with ErrNotLeader on a follower. raft.ErrLeadershipLost, ctx's
// end before raft answered, and ErrClosed mean the outcome is unknown:
// the entry may still commit.
func (n *Node) Apply(ctx context.Context, cmd []byte) (any, error) {
	if n.raft == nil {
		return nil, ErrNotLeader
	}
	f := n.raft.Apply(cmd, timeoutOf(ctx))
	if err := n.await(ctx, f); err != nil {
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
	if n.raft == nil {
		return ErrNotLeader
	}
	return n.await(ctx, n.raft.Barrier(timeoutOf(ctx)))
}

// timeoutOf is how long raft may take to accept a request (its own
// timeouts bound the queueing only; await bounds the answer).
func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return 10 * time.Second
}

// await waits for raft's answer to f until ctx ends or the node closes.
// Raft does not answer every future it has accepted (hashicorp/raft#498:
// one taken as the node stops, or whose entry it skips as applied
// already, is never answered), and a wait on f.Error() alone would then
// last for ever: a scheduler's leader loop or this node's Close would
// hang with it. A request given up on may still commit; the error says
// so. The goroutine that waits for the answer ends when raft answers: if
// raft never does, it stays, as the caller would have.
func (n *Node) await(ctx context.Context, f raft.Future) error {
	answer := make(chan error, 1)
	go func() { answer <- f.Error() }()
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer from raft (the request may still take effect): %w", context.Cause(ctx))
	case <-n.done:
		return ErrClosed
	}
}

// awaitFor is await with a bound of d, for the node's own requests.
func (n *Node) awaitFor(d time.Duration, f raft.Future) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.await(ctx, f)
}

// Voter is one server in the Raft configuration.
type Voter struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
}

// Voters returns the Raft configuration as this node knows it.
func (n *Node) Voters() ([]Voter, error) {
	if n.raft == nil {
		return nil, nil
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []Voter
	for _, s := range f.Configuration().Servers {
		out = append(out, Voter{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// Stats returns raft's counters (empty on a worker).
func (n *Node) Stats() map[string]string {
	if n.raft == nil {
		return map[string]string{}
	}
	return n.raft.Stats()
}

// HandOver prepares a planned stop (SIGTERM): it tells gossip that this
// node is leaving, so the leader chooses it for no more work, and, if this
// node leads, hands leadership to the most up-to-date other voter. That
// voter starts its election at once (raft.LeadershipTransfer), instead of
// after an election timeout of silence as when a leader crashes, and the
// cluster fires on within a round trip or two. Meanwhile this node's Raft
// refuses new proposals, and the moment it steps down its scheduler stops
// firing; the new leader fires the times it left, as after any change of
// leader. The node stays a voter: a server that stops is expected back.
//
// It returns once leadership has moved (handed), false if this node did
// not lead or has no other voter to take over, or the reason the transfer
// failed (ctx ended); the stop goes on either way, and the cluster then
// elects a leader as after a crash. Close must still be called.
func (n *Node) HandOver(ctx context.Context) (handed bool, err error) {
	// The notice and the transfer go together: memberlist's UpdateNode
	// waits until the notice has been retransmitted enough, which takes
	// far longer than the transfer, while the notice itself leaves with
	// the next gossip round.
	announced := make(chan struct{})
	go func() {
		defer close(announced)
		n.announceLeaving(timeoutOf(ctx))
	}()
	defer func() { <-announced }()
	if !n.IsLeader() || !n.hasOtherVoter() {
		return false, nil // nothing to hand over, or nobody to take it (a single node)
	}
	if err := n.await(ctx, n.raft.LeadershipTransfer()); err != nil {
		return false, fmt.Errorf("leadership transfer: %w", err)
	}
	return true, nil
}

// hasOtherVoter reports whether Raft's configuration has a voter besides
// this node.
func (n *Node) hasOtherVoter() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.NodeID {
			return true
		}
	}
	return false
}

// announceLeaving marks this node as leaving in its gossip metadata and
// pushes that to the members within d; it does so once.
func (n *Node) announceLeaving(d time.Duration) {
	if n.ml == nil {
		return
	}
	n.metaMu.Lock()
	already := n.meta.Leaving
	n.meta.Leaving = true
	n.metaMu.Unlock()
	if already {
		return
	}
	if e := n.ml.UpdateNode(d); e != nil {
		n.log.Warn("gossip leave notice", "err", e)
	}
}

// Close leaves gossip, shuts Raft down and closes the log store.
func (n *Node) Close(ctx context.Context) error {
	var err error
	n.once.Do(func() {
		if n.ml != nil {
			// Say we are leaving, then leave: peers record "left", not "dead".
			n.announceLeaving(time.Second)
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
	n.wg.Wait()
	if n.ml != nil {
		errs = append(errs, n.ml.Shutdown())
	}
	if n.raft != nil {
		// Raft closes its transport only once its goroutines have ended,
		// and one may be blocked in a request to a peer that does not
		// answer (up to the transport's timeout). Closing the transport
		// first ends such a request at once; raft then stops as after
		// any failed request. An append blocked in a replication
		// pipeline ends only when the pipeline closes (pipelineTransport).
		f := n.raft.Shutdown()
		n.transport.closePipelines()
		errs = append(errs, n.transport.Close(), f.Error())
	} else if n.transport != nil {
		errs = append(errs, n.transport.Close())
	}
	if n.boltStore != nil {
		errs = append(errs, n.boltStore.Close())
	}
	return errors.Join(errs...)
}

// sleep waits d or until the node closes; it reports false on close.
func (n *Node) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.done:
		return false
	}
}

// RemovePeer removes server id from the Raft configuration, on the
// leader (ErrNotLeader elsewhere). It is for a server that is gone for
// good before the leader reaps it (Config.ReapAfter): a server still
// alive in gossip is refused (ErrPeerAlive), since the leader would add
// it back at once; stop it first. The leader itself is refused too: stop
// it, and it hands leadership over. ErrNoSuchPeer if id is not in the
// configuration.
func (n *Node) RemovePeer(ctx context.Context, id string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if id == n.cfg.NodeID {
		return fmt.Errorf("%s is this node, the leader: stop it instead (it hands leadership over), then remove it from another server: %w", id, ErrPeerAlive)
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	found := false
	for _, s := range f.Configuration().Servers {
		found = found || string(s.ID) == id
	}
	if !found {
		return fmt.Errorf("%s: %w", id, ErrNoSuchPeer)
	}
	if m, ok := n.members.get(id); ok && (m.State == "alive" || m.State == "suspect") {
		return fmt.Errorf("%s (%s in gossip): stop it first, or the leader adds it back: %w", id, m.State, ErrPeerAlive)
	}
	if err := n.await(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, timeoutOf(ctx))); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	n.log.Warn("removed server from the raft configuration on an operator's request", "server", id)
	return nil
}

// Restore replaces the replicated state with a snapshot (an operator's
// restore from a backup), on the leader (ErrNotLeader elsewhere): Raft
// installs it on this node and then on every follower, and the log goes
// on after the greater of the snapshot's last index and the current one.
// The Raft configuration stays the current cluster's. It returns once a
// quorum holds the restored state.
func (n *Node) Restore(ctx context.Context, meta *raft.SnapshotMeta, r io.Reader) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if err := n.raft.Restore(meta, r, timeoutOf(ctx)); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	n.log.Warn("restored the replicated state from a snapshot on an operator's request", "snapshot_index", meta.Index)
	return nil
}

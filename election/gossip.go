package election

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/fencecron/fencecron/fencedstore/keyring"
)

// Meta is what a node tells the others about itself through gossip. It
// must fit memberlist's 512-byte limit.
type Meta struct {
	Role       string            `json:"role"`
	Tags       map[string]string `json:"tags,omitempty"`
	RaftAddr   string            `json:"raft,omitempty"`
	HTTPAddr   string            `json:"http,omitempty"`
	ConfigHash string            `json:"config_hash,omitempty"`
	// Expect is the server's bootstrap_expect; servers refuse to bootstrap
	// with peers that disagree.
	Expect int `json:"expect,omitempty"`
	// HasState is set once the server has Raft state: it belongs to a
	// cluster, so nobody should bootstrap a new one with it.
	HasState bool `json:"has_state,omitempty"`
	// Leading and Term let workers, which have no Raft, find the leader.
	Leading bool   `json:"leading,omitempty"`
	Term    uint64 `json:"term,omitempty"`
	// NoJobs keeps jobs off this node (node.run_jobs: false).
	NoJobs bool `json:"no_jobs,omitempty"`
	// Leaving is set just before a graceful leave, so peers can tell it
	// from a crash.
	Leaving bool `json:"leaving,omitempty"`
	// Secrets are the fingerprints (clustertls.Fingerprint) of the cluster
	// secrets this node accepts: during a roll, nodes switch to the new
	// secret once every member accepts it.
	Secrets []string `json:"secrets,omitempty"`
	// ConfirmsStarts is set by a node whose worker asks the leader to
	// confirm every process start before it (scheduler/startconfirm.go):
	// the leader may take its silence for a start that did not happen.
	ConfirmsStarts bool `json:"confirms_starts,omitempty"`
	// PreStartLeases is set by a node whose worker holds an attempt
	// granted ahead on a short lease until its start, renewed at a third
	// of it (scheduler/fsm/prestart.go): the leader may take its silence
	// for that short lease running out.
	PreStartLeases bool `json:"pre_start_leases,omitempty"`
	// MaxAttempts is how many open attempts of process jobs this node
	// takes at once (node.max_attempts; an HTTP job's counts an eighth,
	// jobs.Spec.AttemptLoad); 0, from an older release, is
	// DefaultMaxAttempts.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// DefaultMaxAttempts is node.max_attempts when the config leaves it out:
// how many attempts a node holds open at once (running, or granted and
// waiting for their fire time) before the leader gives it no more. On a
// 2-core host running three servers, 256 still let process starts starve
// the leader into elections at three times what the host could start;
// 128 did not (docs/measure.md).
const DefaultMaxAttempts = 128

// AttemptLimit is the open attempts m takes at once.
func (m Meta) AttemptLimit() int {
	if m.MaxAttempts > 0 {
		return m.MaxAttempts
	}
	return DefaultMaxAttempts
}

// Member is one node as gossip sees it.
type Member struct {
	Name  string    `json:"name"`
	Addr  string    `json:"addr"`
	State string    `json:"state"` // alive, suspect, dead, left
	Since time.Time `json:"since"` // when it entered that state, as seen here
	Meta  Meta      `json:"meta"`
}

// gossipKey is memberlist's encryption key for a cluster secret.
func gossipKey(secret []byte) []byte { return keyring.Derive(secret, keyring.Gossip) }

func (n *Node) openGossip() error {
	mc := n.profile.memberlistConfig()
	mc.Name = n.cfg.NodeID
	mc.BindAddr = n.cfg.BindAddr
	mc.BindPort = n.cfg.GossipPort
	mc.AdvertiseAddr = n.cfg.AdvertiseAddr
	mc.AdvertisePort = n.cfg.GossipPort
	// A node that comes back under its old name at a new address (a
	// rescheduled pod, a host with a new lease) is accepted a second after
	// gossip declared it dead; memberlist's default refuses the new
	// address until the dead entry is forgotten (GossipToTheDeadTime),
	// unless the node left cleanly. Raft then learns the address from the
	// node's metadata (reconcile).
	mc.DeadNodeReclaimTime = deadNodeReclaim
	mc.Logger = log.New(n.triage.writer("memberlist"), "", 0)
	mc.Delegate = &delegate{node: n}
	mc.Events = n.members
	if len(n.cfg.Secret) > 0 {
		// During a roll, send with the previous secret's key until every
		// member accepts the new one (secretLoop); accept both meanwhile.
		primary := gossipKey(n.cfg.Secret)
		keys := [][]byte{primary}
		if len(n.cfg.PreviousSecret) > 0 {
			primary = gossipKey(n.cfg.PreviousSecret)
			keys = append(keys, primary)
		}
		kr, err := memberlist.NewKeyring(keys, primary)
		if err != nil {
			return fmt.Errorf("gossip keyring: %w", err)
		}
		mc.Keyring, n.keyring = kr, kr
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("start gossip on %s:%d: %w", n.cfg.BindAddr, n.cfg.GossipPort, err)
	}
	n.ml = ml
	n.gossipAddr = ml.LocalNode().Address()
	return nil
}

// deadNodeReclaim is how long a member must have been dead before another
// process may take its name at a different address.
const deadNodeReclaim = time.Second

// joinLoop joins the seeds, retrying until one answers, and tries again
// whenever the node finds itself alone. Seeds may be host names, with or
// without a port (this node's gossip port then): memberlist resolves them
// on every call to Join, so each retry follows DNS to a peer's current
// addresses, and a name with several joins them all.
func (n *Node) joinLoop() {
	defer n.wg.Done()
	if len(n.cfg.Join) == 0 {
		n.joinedOnce.Do(func() { close(n.joined) })
		return
	}
	backoff := 200 * time.Millisecond
	joined := false
	for {
		if !joined || n.ml.NumMembers() <= 1 {
			if k, err := n.ml.Join(n.cfg.Join); err != nil {
				if joined || backoff >= 5*time.Second {
					n.log.Warn("gossip join: no seed answered; retrying", "seeds", n.cfg.Join, "err", err)
				}
				n.rollAfterFailedJoin()
				joined = false
				backoff = min(2*backoff, 5*time.Second)
			} else {
				n.log.Info("joined gossip", "seeds_answered", k, "members", n.ml.NumMembers())
				if !joined {
					n.joinedOnce.Do(func() { close(n.joined) })
				}
				joined = true
				backoff = 5 * time.Second
			}
		}
		if !n.sleep(backoff) {
			return
		}
	}
}

// UpdateMeta changes what this node advertises; the change is gossiped in
// the background.
func (n *Node) UpdateMeta(f func(*Meta)) {
	n.metaMu.Lock()
	f(&n.meta)
	n.metaMu.Unlock()
	select {
	case n.metaDirty <- struct{}{}:
	default:
	}
}

// metaLoop gossips metadata changes; UpdateNode waits for the broadcast,
// which must not hold up whoever changed the metadata.
func (n *Node) metaLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.metaDirty:
			if err := n.ml.UpdateNode(time.Second); err != nil {
				n.log.Warn("gossip meta update", "err", err)
			}
		case <-n.done:
			return
		}
	}
}

// Meta returns what this node advertises.
func (n *Node) Meta() Meta {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	return n.meta
}

// Members returns every node gossip has seen, this one included, with
// dead and departed ones until they are forgotten.
func (n *Node) Members() []Member {
	out := n.members.list()
	// Events do not report suspicion; memberlist's own view does.
	live := map[string]string{}
	for _, m := range n.ml.Members() {
		live[m.Name] = stateName(m.State)
	}
	for i, m := range out {
		if st, ok := live[m.Name]; ok && st != m.State {
			out[i].State = st
		}
	}
	return out
}

type delegate struct{ node *Node }

func (d *delegate) NodeMeta(limit int) []byte {
	b, _ := json.Marshal(d.node.Meta())
	if len(b) > limit {
		d.node.log.Error("gossip metadata too large; advertising none", "bytes", len(b), "limit", limit)
		return nil
	}
	return b
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// memberTable follows gossip events, remembering dead and departed
// members and since when, which memberlist itself forgets.
type memberTable struct {
	self    string
	mu      sync.Mutex
	members map[string]Member
	subs    []chan struct{}
	// onChange, if set (before gossip starts), hears every change of a
	// member's state, outside the lock, with the state before ("" for
	// a member first heard of).
	onChange func(m Member, was string)
}

func newMemberTable(self string) *memberTable {
	return &memberTable{self: self, members: map[string]Member{}}
}

// subscribe returns a channel signalled, coalesced, on every change.
func (t *memberTable) subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	t.subs = append(t.subs, ch)
	t.mu.Unlock()
	return ch
}

// set records node in state st. Event callbacks cannot trust node.State
// (memberlist passes a copy whose State is not updated), so the caller
// says which state the event means.
func (t *memberTable) set(node *memberlist.Node, st string) {
	var meta Meta
	_ = json.Unmarshal(node.Meta, &meta)
	t.mu.Lock()
	old, ok := t.members[node.Name]
	since := time.Now()
	if ok && old.State == st {
		since = old.Since
	}
	m := Member{Name: node.Name, Addr: node.Address(), State: st, Since: since, Meta: meta}
	t.members[node.Name] = m
	for _, ch := range t.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	onChange := t.onChange
	t.mu.Unlock()
	if onChange != nil && (!ok || old.State != st) {
		onChange(m, old.State)
	}
}

func (t *memberTable) NotifyJoin(node *memberlist.Node)   { t.set(node, "alive") }
func (t *memberTable) NotifyUpdate(node *memberlist.Node) { t.set(node, "alive") }

// NotifyLeave cannot tell a crash from a graceful leave; a node that is
// leaving says so in its metadata first (Meta.Leaving).
func (t *memberTable) NotifyLeave(node *memberlist.Node) {
	st := "dead"
	if m, ok := t.get(node.Name); ok && m.Meta.Leaving {
		st = "left"
	}
	t.set(node, st)
}

func (t *memberTable) get(name string) (Member, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[name]
	return m, ok
}

func (t *memberTable) list() []Member {
	t.mu.Lock()
	out := make([]Member, 0, len(t.members))
	for _, m := range t.members {
		out = append(out, m)
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// nameAtRaftAddr returns the name of the server gossip says listens for
// Raft at addr, or "".
func (t *memberTable) nameAtRaftAddr(addr string) string {
	return t.nameWhere(func(m Meta) bool { return m.RaftAddr == addr })
}

// nameWhere returns the name of the one member whose metadata matches,
// or "": when two names claim it (one left, another took its address), it
// does not guess.
func (t *memberTable) nameWhere(match func(Meta) bool) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	name := ""
	for _, m := range t.members {
		if match(m.Meta) {
			if name != "" && name != m.Name {
				return ""
			}
			name = m.Name
		}
	}
	return name
}

// leaderHint returns the alive member that says it leads with the highest
// term, for nodes without Raft.
func (t *memberTable) leaderHint() (id, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var best Member
	for _, m := range t.members {
		// Suspicion is common under load and usually refuted; a suspect
		// leader is still the best guess.
		if (m.State == "alive" || m.State == "suspect") && m.Meta.Leading && m.Meta.Term >= best.Meta.Term {
			best = m
		}
	}
	return best.Name, best.Meta.RaftAddr
}

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

// hclog sends a hashicorp library's logs through slog, by way of the
// triage.
func (t *logTriage) hclog(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:        name,
		Level:       hclog.Info,
		Output:      t.writer(name),
		DisableTime: true,
	})
}

// writer returns a writer that logs each line written to it. hclog and
// the standard logger write whole lines per call, so no buffering is
// needed.
func (t *logTriage) writer(component string) io.Writer {
	return slogWriter{t: t, component: component}
}

type slogWriter struct {
	t         *logTriage
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
		w.t.handle(level, w.component, line)
	}
	return len(p), nil
}

package election

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// logTriage sets the level of what hashicorp's raft and memberlist log,
// and says what their lines mean where they cannot:
//
//   - gossip this node cannot decrypt, or a peer refusing its TLS, is a
//     WARN naming the likely cause (the peer has another cluster.secret);
//     memberlist alone says "no installed keys could decrypt the message"
//     at ERROR and nothing about what to do;
//   - a connection closed under a reader ("use of closed network
//     connection"), or Raft's transport shut down under an RPC ("transport
//     shutdown"), is what a planned stop does: INFO, not ERROR;
//   - Raft retries a peer that gossip already says is dead or gone about
//     twice a second; that is said once per change of the peer's gossip
//     state, with how many failures there were, not a hundred times a
//     minute.
//
// It also remembers the last secret mismatch, for status's answer to "why
// is there no leader?".
type logTriage struct {
	log     *slog.Logger
	members *memberTable
	now     func() time.Time

	mu     sync.Mutex
	quiet  map[string]*quietPeer // by Raft address
	secret secretTrouble
}

// quietPeer is a peer whose Raft failures are being counted, not logged,
// while gossip says it is in state.
type quietPeer struct {
	name, state string
	count       int
}

// secretTrouble is the newest sign that a peer has another secret.
type secretTrouble struct {
	peer   string
	count  int
	last   time.Time
	logged map[string]time.Time // by peer: when its last WARN went out
}

// secretWarnEvery bounds the WARNs about one peer's secret: it retries
// every few seconds for as long as it runs.
const secretWarnEvery = time.Minute

func newLogTriage(l *slog.Logger, members *memberTable) *logTriage {
	t := &logTriage{log: l, members: members, now: time.Now, quiet: map[string]*quietPeer{}}
	t.secret.logged = map[string]time.Time{}
	if members != nil {
		members.onChange = t.memberChanged
	}
	return t
}

var (
	// secretSigns are what memberlist and TLS say when the two ends hold
	// different cluster secrets (gossip keys and cluster CAs both derive
	// from it).
	secretSigns = []string{
		"no installed keys could decrypt the message",
		"remote state is encrypted and encryption is not configured",
		"encryption is configured but remote state is not encrypted",
		"certificate signed by unknown authority",
		"tls: unknown certificate authority",
		"tls: bad certificate",
	}
	// plannedStopSigns are what a reader says when a planned stop closes
	// its connection or shuts Raft's transport down under an RPC it was
	// decoding ("transport shutdown" is raft.ErrTransportShutdown).
	plannedStopSigns = []string{"use of closed network connection", "transport shutdown"}
	// raftRetries are the lines Raft logs each time it fails to reach a
	// peer.
	raftRetries = []string{"failed to heartbeat to", "failed to appendEntries to", "failed to make requestVote RPC", "failed to pipeline appendEntries", "failed to start pipeline replication to"}
	fromRE      = regexp.MustCompile(`from=(\S+)`)
	hostPortRE  = regexp.MustCompile(`(\[[0-9a-fA-F:.]+\]|[0-9A-Za-z.\-]+):\d+`)
)

// handle logs one line from component at the level it was given (what
// hclog or memberlist's prefix says), or at the level and with the words
// the triage gives it.
func (t *logTriage) handle(level slog.Level, component, line string) {
	switch {
	case hasAny(line, plannedStopSigns):
		t.emit(slog.LevelInfo, line, "component", component)
	case hasAny(line, secretSigns):
		t.secretMismatch(component, line)
	case component == "raft" && hasAny(line, raftRetries):
		t.raftRetry(level, line)
	default:
		t.emit(level, line, "component", component)
	}
}

func (t *logTriage) emit(level slog.Level, msg string, args ...any) {
	t.log.Log(context.Background(), level, msg, args...)
}

// hasAny reports whether s holds one of subs, whatever the case: the
// libraries' wording varies between versions.
func hasAny(s string, subs []string) bool {
	s = strings.ToLower(s)
	for _, sub := range subs {
		if strings.Contains(s, strings.ToLower(sub)) {
			return true
		}
	}
	return false
}

// secretMismatch records a sign that a peer holds another secret and
// warns, at most once a minute per peer.
func (t *logTriage) secretMismatch(component, line string) {
	peer := "a peer"
	if m := fromRE.FindStringSubmatch(line); m != nil {
		peer = m[1]
	} else if m := hostPortRE.FindString(line); m != "" {
		peer = m
	}
	now := t.now()
	t.mu.Lock()
	t.secret.peer, t.secret.last = peer, now
	t.secret.count++
	count := t.secret.count
	last, seen := t.secret.logged[peer]
	warn := !seen || now.Sub(last) >= secretWarnEvery
	if warn {
		t.secret.logged[peer] = now
	}
	t.mu.Unlock()
	if !warn {
		return
	}
	what := "gossip from " + peer + " could not be decrypted"
	if component != "memberlist" {
		what = "the TLS of the link with " + peer + " was refused"
	}
	t.emit(slog.LevelWarn, what+": that node probably has a different cluster.secret; every node of a cluster needs the same one (make it once, e.g. openssl rand -hex 32, and give it to all)",
		"component", component, "peer", peer, "count", count, "detail", line)
}

// NoLeaderReason is why a node that knows no leader may have none: a
// peer with another secret seen in the last two minutes, or "".
func (t *logTriage) noLeaderReason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.secret.count == 0 || t.now().Sub(t.secret.last) > 2*time.Minute {
		return ""
	}
	return fmt.Sprintf("gossip from %s could not be decrypted (%d times, the last %s ago): that node probably has a different cluster.secret; give every node the same one",
		t.secret.peer, t.secret.count, t.now().Sub(t.secret.last).Round(time.Second))
}

// raftRetry logs a failure to reach a peer, unless gossip already says
// the peer is dead or gone: then only the first of the episode is logged
// (WARN), and the rest counted.
func (t *logTriage) raftRetry(level slog.Level, line string) {
	addr := hostPortRE.FindString(line)
	var m Member
	var known bool
	if t.members != nil && addr != "" {
		if name := t.members.nameAtRaftAddr(addr); name != "" {
			m, known = t.members.get(name)
		}
	}
	down := known && (m.State == "dead" || m.State == "left")
	t.mu.Lock()
	q := t.quiet[addr]
	switch {
	case down && q != nil && q.state == m.State:
		q.count++
		t.mu.Unlock()
		return
	case down:
		t.quiet[addr] = &quietPeer{name: m.Name, state: m.State, count: 1}
		t.mu.Unlock()
		t.emit(slog.LevelWarn, fmt.Sprintf("raft cannot reach %s, which gossip says is %s; further failures to reach it are counted and said when its gossip state changes", m.Name, m.State),
			"component", "raft", "peer", m.Name, "addr", addr, "detail", line)
		return
	}
	delete(t.quiet, addr)
	t.mu.Unlock()
	if q != nil {
		t.episodeOver(q, addr, m.State)
	}
	t.emit(level, line, "component", "raft")
}

// memberChanged logs a known member's change of gossip state, and ends
// a quiet episode when the peer's state changes. A worker that gossip
// calls dead gets no work until it is alive again, so the log says when
// each was.
func (t *logTriage) memberChanged(m Member, was string) {
	if was != "" && m.Name != t.members.self {
		t.emit(slog.LevelInfo, fmt.Sprintf("%s is %s in gossip, was %s", m.Name, m.State, was), "component", "gossip", "member", m.Name, "role", m.Meta.Role)
	}
	addr := m.Meta.RaftAddr
	if addr == "" {
		return
	}
	t.mu.Lock()
	q := t.quiet[addr]
	if q == nil || q.state == m.State {
		t.mu.Unlock()
		return
	}
	delete(t.quiet, addr)
	t.mu.Unlock()
	t.episodeOver(q, addr, m.State)
}

func (t *logTriage) episodeOver(q *quietPeer, addr, now string) {
	if now == "" {
		now = "unknown"
	}
	t.emit(slog.LevelInfo, fmt.Sprintf("%s is %s in gossip now: raft failed to reach it %d times while it was %s", q.name, now, q.count, q.state),
		"component", "raft", "peer", q.name, "addr", addr, "failures", q.count)
}

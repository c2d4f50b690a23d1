package election_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls/clustertlstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist and raft's network transport leave short-lived
		// connection handlers that exit on their own after Close.
		goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*NetworkTransport).listen"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("time.Sleep"),
		// A probe in flight at Shutdown waits out its own timeout.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

// logFSM is a replicated list of strings.
type logFSM struct {
	mu      sync.Mutex
	entries []string
}

func (f *logFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return len(f.entries)
}
func (f *logFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, fmt.Errorf("no snapshots in tests")
}
func (f *logFSM) Restore(rc io.ReadCloser) error { return rc.Close() }
func (f *logFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

type testNode struct {
	*election.Node
	fsm *logFSM
	cfg election.Config
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startNode(t *testing.T, cfg election.Config) *testNode {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Profile == "" {
		cfg.Profile = election.ProfileFast
	}
	cfg.Logger = testLogger(t).With("test_node", cfg.NodeID)
	if cfg.Secret == nil {
		cfg.Secret = clustertlstest.Secret
	}
	if cfg.TLS == nil {
		cfg.TLS = clustertlstest.Identity(cfg.NodeID, cfg.Secret, cfg.PreviousSecret)
	}
	fsm := &logFSM{}
	n := election.New(cfg, fsm)
	if err := n.Open(); err != nil {
		t.Fatalf("open %s: %v", cfg.NodeID, err)
	}
	t.Cleanup(func() { closeWithin(t, n, time.Minute) })
	return &testNode{Node: n, fsm: fsm, cfg: cfg}
}

// startCluster starts n servers with bootstrap_expect n, joined through
// the first one's gossip address, on the default profile: under the fast
// one a leader steps down after 100 ms without a quorum's answer, which
// a loaded machine's scheduling delays alone can cause.
func startCluster(t *testing.T, n int) []*testNode {
	t.Helper()
	first := startNode(t, election.Config{NodeID: "s1", Server: true, BootstrapExpect: n, Profile: election.ProfileDefault})
	nodes := []*testNode{first}
	for i := 2; i <= n; i++ {
		nodes = append(nodes, startNode(t, election.Config{
			NodeID: fmt.Sprintf("s%d", i), Server: true, BootstrapExpect: n, Profile: election.ProfileDefault,
			Join: []string{first.GossipAddr()},
		}))
	}
	return nodes
}

// apply proposes data on n and waits at most ten seconds for raft's
// answer, so that an answer that never comes fails the test, naming the
// step, rather than hanging it.
func (n *testNode) apply(data string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := n.Apply(ctx, []byte(data))
	return err
}

// closeWithin closes n, and fails the test with the stacks of the
// goroutines still running if that takes longer than d: a Close that
// hangs would otherwise hold the package until go test's own timeout.
func closeWithin(t *testing.T, n *election.Node, d time.Duration) error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- n.Close(context.Background()) }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-closed:
		return err
	case <-timer.C:
		buf := make([]byte, 4<<20)
		t.Errorf("close %s: not done after %s; goroutines:\n%s", n.ID(), d, buf[:runtime.Stack(buf, true)])
		return fmt.Errorf("close %s: not done after %s", n.ID(), d)
	}
}

func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaderOf waits until exactly one of nodes leads and all of them agree.
func leaderOf(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var leader *testNode
	eventually(t, 20*time.Second, "one agreed leader", func() error {
		leader = nil
		for _, n := range nodes {
			if n.IsLeader() {
				if leader != nil {
					return fmt.Errorf("two leaders: %s and %s", leader.ID(), n.ID())
				}
				leader = n
			}
		}
		if leader == nil {
			return fmt.Errorf("no leader")
		}
		for _, n := range nodes {
			if id, _ := n.Leader(); id != leader.ID() {
				return fmt.Errorf("%s thinks the leader is %q, not %s", n.ID(), id, leader.ID())
			}
		}
		return nil
	})
	return leader
}

func voterIDs(t *testing.T, n *testNode) []string {
	t.Helper()
	vs, err := n.Voters()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range vs {
		if v.Voter {
			ids = append(ids, v.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestNode_BootstrapExpectElectsOneLeaderAndReplicates(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	if got, want := strings.Join(voterIDs(t, leader), ","), "s1,s2,s3"; got != want {
		t.Errorf("voters = %s, want %s", got, want)
	}
	for i := range 3 {
		if err := leader.apply(fmt.Sprintf("e%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		eventually(t, 10*time.Second, n.ID()+" has every entry", func() error {
			if got := strings.Join(n.fsm.list(), ","); got != "e0,e1,e2" {
				return fmt.Errorf("entries %q", got)
			}
			return nil
		})
	}
	for _, n := range nodes {
		if n == leader {
			continue
		}
		if err := n.apply("x"); !errors.Is(err, election.ErrNotLeader) {
			t.Errorf("apply on follower %s: err = %v, want ErrNotLeader", n.ID(), err)
		}
	}
}

func TestNode_LateServerBecomesVoterWorkerNever(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	join := []string{nodes[0].GossipAddr()}
	late := startNode(t, election.Config{NodeID: "s4", Server: true, BootstrapExpect: 3, Join: join, Profile: election.ProfileDefault})
	worker := startNode(t, election.Config{NodeID: "w1", Server: false, Join: join, Profile: election.ProfileDefault})
	eventually(t, 15*time.Second, "s4 is a voter", func() error {
		if got := strings.Join(voterIDs(t, leader), ","); got != "s1,s2,s3,s4" {
			return fmt.Errorf("voters %s", got)
		}
		return nil
	})
	// Leadership may move while s4 joins (a loaded machine misses a
	// heartbeat): the entry goes through whoever leads when it is sent.
	servers := append(slices.Clone(nodes), late)
	eventually(t, 20*time.Second, "an entry applied after the join", func() error {
		for _, n := range servers {
			if n.IsLeader() {
				return n.apply("after-join")
			}
		}
		return fmt.Errorf("no leader")
	})
	eventually(t, 10*time.Second, "s4 has the entry", func() error {
		if !slices.Contains(late.fsm.list(), "after-join") {
			return fmt.Errorf("entries %q", late.fsm.list())
		}
		return nil
	})
	// The worker learns the leader through gossip, and never votes.
	eventually(t, 20*time.Second, "worker knows the leader", func() error {
		leader = leaderOf(t, servers)
		if id, _ := worker.Leader(); id != leader.ID() {
			return fmt.Errorf("worker thinks the leader is %q, not %s", id, leader.ID())
		}
		if addr, err := worker.LeaderHTTP(); err == nil || addr != "" {
			return nil // no HTTP address advertised in this test: an error is expected
		}
		return nil
	})
	if slices.Contains(voterIDs(t, leader), "w1") {
		t.Error("worker w1 is in the raft configuration")
	}
	if got := worker.State(); got != "Worker" {
		t.Errorf("worker state = %q", got)
	}
}

func TestNode_ReapsGoneServerButNotBelowExpect(t *testing.T) {
	first := startNode(t, election.Config{NodeID: "s1", Server: true, BootstrapExpect: 3, ReapAfter: 500 * time.Millisecond})
	nodes := []*testNode{first}
	for i := 2; i <= 4; i++ {
		nodes = append(nodes, startNode(t, election.Config{
			NodeID: fmt.Sprintf("s%d", i), Server: true, BootstrapExpect: 3, ReapAfter: 500 * time.Millisecond,
			Join: []string{first.GossipAddr()},
		}))
	}
	leader := leaderOf(t, nodes)
	eventually(t, 15*time.Second, "four voters", func() error {
		if got := len(voterIDs(t, leader)); got != 4 {
			return fmt.Errorf("%d voters", got)
		}
		return nil
	})
	// Stop one follower for good: it is reaped.
	followers := []*testNode{}
	for _, n := range nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	closeWithin(t, followers[0].Node, time.Minute)
	eventually(t, 20*time.Second, "the stopped server reaped", func() error {
		if got := voterIDs(t, leader); len(got) != 3 || slices.Contains(got, followers[0].ID()) {
			return fmt.Errorf("voters %v", got)
		}
		return nil
	})
	// Stop a second: reaping it would leave fewer voters than
	// bootstrap_expect, so it stays. Reconcile runs every 500ms in the
	// fast profile and ReapAfter is 500ms: three seconds is many rounds.
	closeWithin(t, followers[1].Node, time.Minute)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if got := voterIDs(t, leader); len(got) != 3 {
			t.Fatalf("voters went below bootstrap_expect: %v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The two left still commit, through whichever of them leads now (on
	// a busy machine leadership may have moved). Leadership may also move
	// between the two during the apply (CI: "leadership lost while
	// committing log", the outcome unknown): an apply that met a change of
	// leader goes again to the new one, at most three times.
	for try := 1; ; try++ {
		l := leaderOf(t, []*testNode{leader, followers[2]})
		err := l.apply("still-working")
		if err == nil {
			break
		}
		if moved := errors.Is(err, election.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost); !moved || try == 3 {
			t.Fatalf("apply with 2 of 3 voters alive, try %d on %s: %v", try, l.ID(), err)
		}
		t.Logf("try %d: leadership moved during the apply on %s: %v", try, l.ID(), err)
	}
}

// hangingStore is a log store whose writes can be made to hang, like a
// disk that stops answering.
type hangingStore struct {
	raft.LogStore
	mu      sync.Mutex
	hangOn  []byte // a write of an entry holding these bytes hangs until release
	release chan struct{}
}

func (s *hangingStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	on := s.hangOn
	s.mu.Unlock()
	for _, l := range logs {
		if on != nil && bytes.Contains(l.Data, on) {
			<-s.release
			break
		}
	}
	return s.LogStore.StoreLogs(logs)
}
func (s *hangingStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *hangingStore) hangOnWrite(data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hangOn = nil
	if data != "" {
		s.hangOn = []byte(data)
	}
}

// The leader's own write of an entry hangs: its apply fails with
// ErrLogStoreHung, it steps down, and a healthy node leads and commits.
// Only that entry's write hangs, so that the node's other writes, as a
// follower if leadership moved before the apply, go on.
func TestNode_LeaderOnHungDiskStepsDown(t *testing.T) {
	stores := map[string]*hangingStore{}
	var mu sync.Mutex
	wrap := func(id string) func(raft.LogStore) raft.LogStore {
		return func(s raft.LogStore) raft.LogStore {
			h := &hangingStore{LogStore: s, release: make(chan struct{})}
			mu.Lock()
			stores[id] = h
			mu.Unlock()
			return h
		}
	}
	var nodes []*testNode
	for i := 1; i <= 3; i++ {
		cfg := election.Config{NodeID: fmt.Sprintf("s%d", i), Server: true, BootstrapExpect: 3}
		if i > 1 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		cfg.SetLogStoreWrapper(wrap(cfg.NodeID))
		nodes = append(nodes, startNode(t, cfg))
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range stores {
			close(h.release)
		}
	})

	// A leader elected just after the cluster formed may hand over
	// before the apply reaches it (ErrNotLeader, nothing written): the
	// entry is then applied on the new leader, at most three times.
	var old *testNode
	for try := 1; ; try++ {
		old = leaderOf(t, nodes)
		mu.Lock()
		h := stores[old.ID()]
		mu.Unlock()
		h.hangOnWrite("on-hung-disk")
		err := old.apply("on-hung-disk")
		if err != nil && strings.Contains(err.Error(), election.ErrLogStoreHung.Error()) {
			break // Raft passes the store's error on as text
		}
		if !errors.Is(err, election.ErrNotLeader) || try == 3 {
			t.Fatalf("apply on a hung disk: err = %v, want one that says %q", err, election.ErrLogStoreHung)
		}
		h.hangOnWrite("")
	}
	eventually(t, 20*time.Second, "a healthy node leads and commits", func() error {
		for _, n := range nodes {
			if n != old && n.IsLeader() {
				if err := n.apply("after"); err != nil {
					return err
				}
				return nil
			}
		}
		return fmt.Errorf("no healthy leader; old leader %s state %s", old.ID(), old.State())
	})
	if old.IsLeader() {
		t.Error("the node on the hung disk still leads")
	}
}

// A leader whose process is gone, on a host that is up, is replaced
// without waiting out the heartbeat timeout: its port refuses the
// followers' dial. The timeout here is long, so that raft's own timers
// could not have elected the new leader in the time allowed.
func TestNode_CrashedLeaderReplacedBeforeTheHeartbeatTimeout(t *testing.T) {
	const heartbeatTimeout = 3 * time.Second
	var nodes []*testNode
	for i := 1; i <= 3; i++ {
		cfg := election.Config{NodeID: fmt.Sprintf("s%d", i), Server: true, BootstrapExpect: 3}
		if i > 1 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		cfg.SetSlowTimeouts(heartbeatTimeout)
		nodes = append(nodes, startNode(t, cfg))
	}
	old := leaderOf(t, nodes)
	st, _ := old.RaftStats()
	if err := closeWithin(t, old.Node, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Raft heard the old leader until Close shut it down, so from here
	// raft's timers alone would take a heartbeat timeout at least.
	closed := time.Now()
	next := leaderOf(t, slices.DeleteFunc(slices.Clone(nodes), func(n *testNode) bool { return n == old }))
	took := time.Since(closed)
	if took >= heartbeatTimeout {
		t.Errorf("the new leader took %s, no less than the heartbeat timeout %s: the refused port did not start the election", took, heartbeatTimeout)
	}
	if now, _ := next.RaftStats(); now.Term <= st.Term {
		t.Errorf("new leader's term %d, not past the old %d", now.Term, st.Term)
	}
	if err := next.apply("after"); err != nil {
		t.Errorf("the new leader cannot commit: %v", err)
	}
	t.Logf("new leader %s after %s", next.ID(), took.Round(time.Millisecond))
}

func TestTurnOf_OneFollowerGoesFirst(t *testing.T) {
	servers := []raft.Server{
		{ID: "s3", Suffrage: raft.Voter}, {ID: "s1", Suffrage: raft.Voter},
		{ID: "s2", Suffrage: raft.Voter}, {ID: "s0", Suffrage: raft.Nonvoter},
	}
	for _, c := range []struct {
		self, leader raft.ServerID
		turn         int
		ok           bool
	}{
		{"s1", "s2", 0, true}, {"s3", "s2", 1, true},
		{"s2", "s1", 0, true}, {"s3", "s1", 1, true},
		{"s2", "s2", 0, false}, // the leader itself
		{"s0", "s2", 0, false}, // not a voter
		{"s9", "s2", 0, false}, // not in the configuration
	} {
		turn, ok := election.TurnOf(servers, c.self, c.leader)
		if turn != c.turn || ok != c.ok {
			t.Errorf("turnOf(%s, leader %s) = %d, %v; want %d, %v", c.self, c.leader, turn, ok, c.turn, c.ok)
		}
	}
	// The second in turn dials only once the first has had its turn
	// and its election time to reach it, and both before raft's timeout.
	first, second := election.DialAfter(election.ProfileDefault, 0), election.DialAfter(election.ProfileDefault, 1)
	if !(first < second && second < 500*time.Millisecond) {
		t.Errorf("dial after %s then %s: want increasing and under the default 500ms heartbeat timeout", first, second)
	}
}

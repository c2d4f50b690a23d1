package election_test

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/election/clustertls/clustertlstest"
)

func termOf(t *testing.T, n *testNode) uint64 {
	t.Helper()
	term, err := strconv.ParseUint(n.Stats()["term"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return term
}

// TestRaft_ForgedRPCsRefusedAtTheHandshake is the attack of issue 11 in
// one process: a plain hashicorp/raft TCP transport, which is what anyone
// without the cluster secret has, sends a forged AppendEntries at term+1
// to a follower and a heartbeat at term+100 to the leader.
func TestRaft_ForgedRPCsRefusedAtTheHandshake(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	if err := leader.apply("before"); err != nil {
		t.Fatal(err)
	}
	var follower *testNode
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	term := termOf(t, leader)

	attacker, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	forged := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte(attacker.LocalAddr())},
		Term:      term + 1, PrevLogEntry: 0, PrevLogTerm: 0, LeaderCommitIndex: 1 << 20,
		Entries: []*raft.Log{{Index: 1 << 20, Term: term + 1, Type: raft.LogCommand, Data: []byte("forged")}},
	}
	var resp raft.AppendEntriesResponse
	if err := attacker.AppendEntries(raft.ServerID(follower.ID()), raft.ServerAddress(follower.RaftAddr()), forged, &resp); err == nil {
		t.Errorf("a forged AppendEntries to follower %s got an answer: %+v", follower.ID(), resp)
	}
	heartbeat := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte(attacker.LocalAddr())},
		Term:      term + 100,
	}
	if err := attacker.AppendEntries(raft.ServerID(leader.ID()), raft.ServerAddress(leader.RaftAddr()), heartbeat, &resp); err == nil {
		t.Errorf("a heartbeat at term+100 to the leader got an answer: %+v", resp)
	}
	vote := &raft.RequestVoteRequest{RPCHeader: heartbeat.RPCHeader, Term: term + 100, LastLogIndex: 1 << 30, LastLogTerm: term + 100}
	var vresp raft.RequestVoteResponse
	if err := attacker.RequestVote(raft.ServerID(follower.ID()), raft.ServerAddress(follower.RaftAddr()), vote, &vresp); err == nil {
		t.Errorf("a vote request at term+100 got an answer: %+v", vresp)
	}

	// The cluster goes on as if nothing had been sent.
	if err := leader.apply("after"); err != nil {
		t.Fatalf("the leader cannot commit after the attack: %v", err)
	}
	for _, n := range nodes {
		eventually(t, 10*time.Second, n.ID()+" has the real entries", func() error {
			if got := strings.Join(n.fsm.list(), ","); got != "before,after" {
				return fmt.Errorf("entries %q", got)
			}
			return nil
		})
		if got := termOf(t, n); got != term {
			t.Errorf("%s: term %d, want %d: an outsider moved it", n.ID(), got, term)
		}
	}
	if !leader.IsLeader() {
		t.Error("the leader lost its leadership to an outsider")
	}
}

// TestRaft_ConnectionsFromStrangersAreCut checks that a stranger who
// connects and says nothing does not keep the connection.
func TestRaft_ConnectionsFromStrangersAreCut(t *testing.T) {
	nodes := startCluster(t, 1)
	leaderOf(t, nodes)
	c, err := net.Dial("tcp", nodes[0].RaftAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Plain bytes where a TLS handshake must come: the node hangs up.
	c.Write([]byte("\x00\x00\x00\x00 hello raft"))
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if n, err := c.Read(make([]byte, 512)); err == nil {
		// A TLS alert is allowed; after it the connection must end.
		if _, err := c.Read(make([]byte, 512)); err == nil {
			t.Errorf("the node kept talking to a stranger (%d bytes, then more)", n)
		}
	}
}

// TestNode_SecretRollWithoutOutage rolls a three-server cluster from one
// secret to another, one node at a time, in the two documented steps, and
// commits an entry after every restart.
func TestNode_SecretRollWithoutOutage(t *testing.T) {
	oldSecret, newSecret := clustertlstest.Secret, []byte("election-test-rolled-secret-9876543210zyx")
	type slot struct {
		node       *testNode
		raft, goss int
		dir        string
		usingNew   []bool
		mu         sync.Mutex
	}
	slots := make([]*slot, 3)
	var nodes []*testNode
	for i := range slots {
		cfg := election.Config{NodeID: fmt.Sprintf("s%d", i+1), Server: true, BootstrapExpect: 3, Secret: oldSecret}
		if i > 0 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		n := startNode(t, cfg)
		_, p, _ := net.SplitHostPort(n.RaftAddr())
		_, g, _ := net.SplitHostPort(n.GossipAddr())
		rp, _ := strconv.Atoi(p)
		gp, _ := strconv.Atoi(g)
		slots[i] = &slot{node: n, raft: rp, goss: gp, dir: n.cfg.DataDir}
		nodes = append(nodes, n)
	}
	commit := func(what string) {
		t.Helper()
		var live []*testNode
		for _, s := range slots {
			live = append(live, s.node)
		}
		eventually(t, 30*time.Second, "commit "+what, func() error {
			for _, n := range live {
				if n.IsLeader() {
					return n.apply(what)
				}
			}
			return fmt.Errorf("no leader")
		})
	}
	commit("start")
	restart := func(i int, secret, previous []byte) {
		t.Helper()
		s := slots[i]
		closeWithin(t, s.node.Node, time.Minute)
		var join []string
		for j, o := range slots {
			if j != i {
				join = append(join, o.node.GossipAddr())
			}
		}
		cfg := election.Config{
			NodeID: s.node.ID(), Server: true, BootstrapExpect: 3, DataDir: s.dir,
			RaftPort: s.raft, GossipPort: s.goss, Join: join, Secret: secret, PreviousSecret: previous,
			UseNewSecret: func(b bool) { s.mu.Lock(); s.usingNew = append(s.usingNew, b); s.mu.Unlock() },
		}
		s.mu.Lock()
		s.usingNew = nil
		s.mu.Unlock()
		s.node = startNode(t, cfg)
	}
	// Every node must hear the restarted one's gossip: a node that sent
	// with a key its peers cannot read would stay unheard.
	heard := func(i int, secrets ...[]byte) {
		t.Helper()
		var want []string
		for _, sec := range secrets {
			want = append(want, clustertls.Fingerprint(sec))
		}
		for j, o := range slots {
			if j == i {
				continue
			}
			eventually(t, 20*time.Second, fmt.Sprintf("%s hears %s's new metadata", o.node.ID(), slots[i].node.ID()), func() error {
				for _, m := range o.node.Members() {
					if m.Name == slots[i].node.ID() {
						if m.State != "alive" || !slices.Equal(m.Meta.Secrets, want) {
							return fmt.Errorf("%s is %s with secrets %v, want alive with %v", m.Name, m.State, m.Meta.Secrets, want)
						}
						return nil
					}
				}
				return fmt.Errorf("not a member")
			})
		}
	}
	// Step 1: the new secret, the old one as previous.
	for i := range slots {
		restart(i, newSecret, oldSecret)
		heard(i, newSecret, oldSecret)
		commit(fmt.Sprintf("step1-%d", i))
	}
	for _, s := range slots {
		eventually(t, 20*time.Second, s.node.ID()+" sends with the new secret", func() error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.usingNew) == 0 || !s.usingNew[len(s.usingNew)-1] {
				return fmt.Errorf("switches so far: %v", s.usingNew)
			}
			return nil
		})
	}
	// Step 2: the new secret alone.
	for i := range slots {
		restart(i, newSecret, nil)
		heard(i, newSecret)
		commit(fmt.Sprintf("step2-%d", i))
	}
	var live []*testNode
	for _, s := range slots {
		live = append(live, s.node)
	}
	leader := leaderOf(t, live)
	for _, n := range live {
		if got := len(n.Members()); got != 3 {
			t.Errorf("%s sees %d members after the roll, want 3", n.ID(), got)
		}
	}
	if !slices.ContainsFunc(live, func(n *testNode) bool { return n == leader }) {
		t.Error("no leader among the rolled nodes")
	}
}

// A node that restarts with both secrets after every other node has
// dropped the old one (the last node of step 2, crashed and restarted on
// its step-1 config) still gets into gossip, and sends with the new one.
func TestNode_RollingNodeJoinsACompletedRoll(t *testing.T) {
	oldSecret, newSecret := clustertlstest.Secret, []byte("election-test-rolled-secret-9876543210zyx")
	first := startNode(t, election.Config{NodeID: "s1", Server: true, BootstrapExpect: 1, Secret: newSecret})
	leaderOf(t, []*testNode{first})
	var mu sync.Mutex
	var switched []bool
	startNode(t, election.Config{
		NodeID: "w1", Join: []string{first.GossipAddr()}, Secret: newSecret, PreviousSecret: oldSecret,
		UseNewSecret: func(b bool) { mu.Lock(); switched = append(switched, b); mu.Unlock() },
	})
	eventually(t, 30*time.Second, "s1 hears w1 and w1 sends with the new secret", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range first.Members() {
			if m.Name == "w1" && m.State == "alive" && len(switched) > 0 && switched[len(switched)-1] {
				return nil
			}
		}
		return fmt.Errorf("s1 sees %v; w1 switched %v", first.Members(), switched)
	})
}

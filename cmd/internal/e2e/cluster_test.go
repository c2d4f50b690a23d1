package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// tickJobs fire every second and publish a line, so a leader always has
// grants to propose.
const tickJobs = `  - name: tick
    schedule: "* * * * * *"
    shell: 'echo "$FENCECRON_SCHEDULED_AT $FENCECRON_NODE"'
    output: 'ticks/{{ .Scheduled.Format "150405" }}.txt'
    overlap: allow
    lease_ttl: 5s
    timeout: 10s
`

// startCluster starts a cluster of o's shape with the test build of
// fencecron, unless o names another binary, and stops it when the test ends.
func startCluster(t *testing.T, o localcluster.Options) *localcluster.Cluster {
	t.Helper()
	if o.Binary == "" {
		o.Binary = proctest.Binary(t)
	}
	o.Dir = t.TempDir()
	c, err := localcluster.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, c)
	return c
}

// startRaceCluster is startCluster with race-built nodes (see
// proctest.RaceBinary), for the tests that drive a node's concurrent
// paths through kills, pauses and hand-overs.
func startRaceCluster(t *testing.T, o localcluster.Options) *localcluster.Cluster {
	t.Helper()
	o.Binary = proctest.RaceBinary(t)
	return startCluster(t, o)
}

// waitJobSet waits until n has a job set: a leader applies its file's
// jobs right after its election entry, so one agreed on may not have
// them yet, nor a follower it has not reached.
func waitJobSet(t *testing.T, n *localcluster.Node) {
	t.Helper()
	if err := localcluster.Until(15*time.Second, func() error {
		st, err := n.Status()
		if err != nil {
			return err
		}
		if st.Jobs.Count == 0 {
			return fmt.Errorf("%s has no job set yet", n.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// stopAtCleanup stops c when the test ends, and prints its nodes' logs if
// it failed.
func stopAtCleanup(t *testing.T, c *localcluster.Cluster) {
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("--- log of %s (tail) ---\n%s", n.Name, n.LogTail(8000))
			}
		}
	})
}

// agree waits until the live servers agree on a leader and its epoch.
func agree(t *testing.T, c *localcluster.Cluster, d time.Duration) localcluster.Agreement {
	t.Helper()
	var a localcluster.Agreement
	err := localcluster.Until(d, func() error {
		var err error
		a, err = localcluster.Agreed(c.Live(c.Servers()))
		return err
	})
	if err != nil {
		t.Fatalf("servers never agreed on a leader: %v", err)
	}
	return a
}

// waitFollowerOf waits until n is a follower of leader.
func waitFollowerOf(t *testing.T, n *localcluster.Node, leader string) {
	t.Helper()
	if err := localcluster.Until(20*time.Second, func() error {
		st, err := n.Status()
		if err != nil {
			return err
		}
		if st.RaftState != "Follower" || st.Leader != leader {
			return fmt.Errorf("%s: state %s, leader %q; want a follower of %s", n.Name, st.RaftState, st.Leader, leader)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// allAttempts returns every attempt the cluster recorded, by id.
func allAttempts(t *testing.T, n *localcluster.Node) []jobs.Attempt {
	t.Helper()
	runs, err := n.Runs("", 10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []jobs.Attempt
	for _, r := range runs {
		out = append(out, r.Attempts...)
	}
	return out
}

// The three example configs start a cluster that elects one leader;
// apply replaces the job set from any node, drift is reported, and an
// invalid file changes nothing.
func TestCluster_ExampleConfigsAgreeAndApply(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The examples' ports and data directory move with the variables the
	// README gives; the files themselves are used as they are. Their
	// store node is not started: this test is about the job set.
	prefix := freePortPrefix(t)
	env := []string{
		"FENCECRON_SECRET=example-cluster-secret-0123456789-abcdef",
		"FENCECRON_PORT_PREFIX=" + strconv.Itoa(prefix),
		"FENCECRON_CLUSTER_DIR=" + filepath.Join(dir, "data"),
	}
	var nodes []*localcluster.Node
	var procs []*proctest.Proc
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("n%d", i)
		path := filepath.Join("..", "..", "..", "deploy", "examples", "cluster", name+".yaml")
		procs = append(procs, proctest.StartEnv(t, name, env, "agent", "-config", path))
		nodes = append(nodes, &localcluster.Node{Name: name, HTTP: prefix*100 + 80 + i})
	}
	var a localcluster.Agreement
	if err := localcluster.Until(30*time.Second, func() error {
		var err error
		a, err = localcluster.Agreed(nodes)
		return err
	}); err != nil {
		t.Fatalf("example cluster never agreed: %v", err)
	}
	t.Logf("leader %s, epoch %d", a.Leader, a.Epoch)
	// The leader applies its file's jobs right after its election entry.
	var st wire.Status
	if err := localcluster.Until(15*time.Second, func() error {
		var err error
		if st, err = nodes[0].Status(); err != nil {
			return err
		}
		if st.Jobs.Count != 2 {
			return fmt.Errorf("job set %+v", st.Jobs)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(st.Voters) != 3 || len(st.Members) != 3 {
		t.Errorf("voters %v, members %d; want 3 and 3", st.Voters, len(st.Members))
	}
	firstHash := st.Jobs.Hash

	// Apply a different job set through a follower.
	var follower *localcluster.Node
	for _, n := range nodes {
		if n.Name != a.Leader {
			follower = n
			break
		}
	}
	jobsFile := filepath.Join(dir, "jobs.yaml")
	os.WriteFile(jobsFile, []byte("jobs:\n"+tickJobs), 0o600)
	addr := fmt.Sprintf("127.0.0.1:%d", follower.HTTP)
	out, err := cliEnv(t, env, "apply", "-addr", addr, jobsFile)
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if !strings.Contains(out, "applied 1 job from") {
		t.Errorf("apply printed %q", out)
	}
	if err := localcluster.Until(10*time.Second, func() error {
		for _, n := range nodes {
			st, err := n.Status()
			if err != nil {
				return err
			}
			if st.Jobs.Hash == firstHash || st.Jobs.Count != 1 || !strings.Contains(st.Jobs.Source, "fencecron apply") {
				return fmt.Errorf("%s: job set %+v", n.Name, st.Jobs)
			}
			if !st.Drifted {
				return fmt.Errorf("%s: its file differs from the applied set but it does not say drifted", n.Name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// An invalid file is refused with its problems and changes nothing.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("jobs:\n  - name: x\n    schedule: \"61 * * * *\"\n    shell: true\n"), 0o600)
	_, err = cliEnv(t, env, "apply", "-addr", addr, bad)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:3:15") {
		t.Errorf("applying an invalid file: err = %v, want its problem with position", err)
	}
	st2, err := nodes[0].Status()
	if err != nil {
		t.Fatal(err)
	}
	if st2.Jobs.Count != 1 || st2.Jobs.Hash == firstHash {
		t.Errorf("after the invalid apply the job set is %+v", st2.Jobs)
	}

	// SIGHUP on a node applies its own file: the set goes back to the
	// examples' jobs, and nobody has drifted any more.
	if err := procs[2].Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := localcluster.Until(15*time.Second, func() error {
		for _, n := range nodes {
			st, err := n.Status()
			if err != nil {
				return err
			}
			if st.Jobs.Hash != firstHash || st.Drifted || !strings.Contains(st.Jobs.Source, "SIGHUP") {
				return fmt.Errorf("%s: job set %+v, drifted %v", n.Name, st.Jobs, st.Drifted)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// SIGKILL the leader: a new leader with a greater epoch; the old one,
// restarted on its data directory, rejoins as a follower; a node whose
// data directory was wiped rejoins too and catches up.
func TestCluster_LeaderKilledRestartedAndWipedNodeRejoins(t *testing.T) {
	t.Parallel()
	c := startRaceCluster(t, localcluster.Options{Servers: 3, StoreNode: true, Jobs: tickJobs})
	first := agree(t, c, 30*time.Second)
	old := c.Node(first.Leader)
	old.Kill()
	second := agree(t, c, 20*time.Second)
	t.Logf("leader %s epoch %d, then after SIGKILL %s epoch %d", first.Leader, first.Epoch, second.Leader, second.Epoch)
	if second.Leader == first.Leader || second.Epoch <= first.Epoch {
		t.Fatalf("after killing %s: leader %s epoch %d, want another leader with an epoch above %d", first.Leader, second.Leader, second.Epoch, first.Epoch)
	}
	// Its host is up, so its port refuses the followers' dial and one of
	// them may start the election without waiting out the heartbeat
	// timeout; on a busy machine the timeout can come first. That the
	// refused dial starts an election is election's own test
	// (TestNode_CrashedLeaderReplacedBeforeTheHeartbeatTimeout); here it
	// is only reported.
	fast := slices.ContainsFunc(c.Servers(), func(n *localcluster.Node) bool {
		b, err := os.ReadFile(n.LogPath)
		return err == nil && n != old && bytes.Contains(b, []byte("Raft port refuses connections, so its process is gone"))
	})
	t.Logf("a survivor started the election on the refused dial: %v", fast)

	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	// It follows whoever leads by then: a loaded machine may hold another
	// election meanwhile, which is not what this test is about.
	waitFollowerOf(t, old, agree(t, c, 30*time.Second).Leader)

	// Wipe a follower's data directory and bring it back.
	var victim *localcluster.Node
	for _, n := range c.Servers() {
		if n.Name != second.Leader && n != old {
			victim = n
		}
	}
	victim.Kill()
	if err := victim.Wipe(); err != nil {
		t.Fatal(err)
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	if err := localcluster.Until(30*time.Second, func() error {
		st, err := victim.Status()
		if err != nil {
			return err
		}
		a, err := localcluster.Agreed(c.Live(c.Servers()))
		if err != nil {
			return err
		}
		want, err := c.Node(a.Leader).Status()
		if err != nil {
			return err
		}
		if st.RaftState != "Follower" || st.Leader != want.Leader || st.Epoch != want.Epoch || st.Jobs.Hash != want.Jobs.Hash {
			return fmt.Errorf("wiped %s: state %s leader %q epoch %d jobs %s; leader says %s/%d/%s",
				victim.Name, st.RaftState, st.Leader, st.Epoch, st.Jobs.Hash, want.Leader, want.Epoch, want.Jobs.Hash)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if a := agree(t, c, 10*time.Second); a.Epoch < second.Epoch {
		t.Errorf("epoch %d after the rejoin, below %d", a.Epoch, second.Epoch)
	}
}

// SIGSTOP the leader for longer than the election timeout: the others
// elect a new leader; after SIGCONT the old one steps down, and nothing it
// proposed while deposed was committed: every grant after the new
// leader's election carries the new epoch.
func TestCluster_PausedLeaderStepsDownAndCommitsNothing(t *testing.T) {
	t.Parallel()
	c := startRaceCluster(t, localcluster.Options{Servers: 3, StoreNode: true, Jobs: tickJobs})
	first := agree(t, c, 30*time.Second)
	old := c.Node(first.Leader)
	if err := old.Pause(); err != nil {
		t.Fatal(err)
	}
	second := agree(t, c, 20*time.Second)
	if second.Leader == first.Leader || second.Epoch <= first.Epoch {
		t.Fatalf("while %s is stopped: leader %s epoch %d", first.Leader, second.Leader, second.Epoch)
	}
	// Let a few fire times pass while the old leader is stopped: it will
	// wake with grants due and try to propose them.
	leader := c.Node(second.Leader)
	if err := localcluster.Until(10*time.Second, func() error {
		for _, a := range allAttempts(t, leader) {
			if a.Token.Epoch == second.Epoch {
				return nil
			}
		}
		return fmt.Errorf("no grant in epoch %d yet", second.Epoch)
	}); err != nil {
		t.Fatal(err)
	}
	if err := old.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFollowerOf(t, old, second.Leader)
	// Give the resumed node's stale proposals time to be refused, then
	// read the committed history: in log order, epochs never go back.
	agree(t, c, 10*time.Second)
	atts := allAttempts(t, leader)
	var newest jobs.Fence
	for _, a := range atts {
		if a.Token.Seq > newest.Seq {
			newest = a.Token
		}
	}
	var electedAt uint64
	var evs struct{ Events []jobs.Event }
	if err := leader.GetJSON("/api/v1/events?limit=5000", &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		if e.Kind == jobs.EventElected && e.Epoch == second.Epoch {
			electedAt = e.Index
		}
	}
	if electedAt == 0 {
		t.Fatalf("no election entry for epoch %d in the trail", second.Epoch)
	}
	for _, a := range atts {
		if a.Token.Seq > electedAt && a.Token.Epoch < second.Epoch {
			t.Errorf("attempt %s has token %s: committed after epoch %d began at index %d, from the deposed leader", a.ID, a.Token, second.Epoch, electedAt)
		}
	}
	if newest.Epoch < second.Epoch {
		t.Errorf("newest grant %s is older than epoch %d", newest, second.Epoch)
	}
}

// Five servers keep working with two gone and refuse writes with three
// gone.
func TestCluster_FiveServersQuorum(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 5, StoreNode: true, Jobs: tickJobs})
	first := agree(t, c, 40*time.Second)
	// Kill two followers.
	killed := 0
	for _, n := range c.Servers() {
		if n.Name != first.Leader && killed < 2 {
			n.Kill()
			killed++
		}
	}
	leader := c.Node(first.Leader)
	var run jobs.Run
	if err := localcluster.Until(15*time.Second, func() error {
		return leader.Post("/api/v1/jobs/tick/trigger", nil, &run)
	}); err != nil {
		t.Fatalf("trigger with 3 of 5 servers: %v", err)
	}
	if a, ok := run.Latest(); !ok || a.Token.Epoch < first.Epoch {
		t.Errorf("trigger with 3 of 5 granted %+v", run)
	}
	// A third: no majority. Writes are refused and no grant commits.
	for _, n := range c.Servers() {
		if n.Name != first.Leader && n.Running() {
			n.Kill()
			break
		}
	}
	before := len(allAttempts(t, leader))
	err := localcluster.Until(10*time.Second, func() error {
		if err := leader.Post("/api/v1/jobs/tick/pause", nil, nil); err == nil {
			return fmt.Errorf("pause with 2 of 5 servers succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := len(allAttempts(t, leader))
	if after > before+1 {
		// One grant may have been in flight when the third died.
		t.Errorf("grants kept committing without a majority: %d then %d", before, after)
	}
}

func httpGet(url string) ([]byte, error) {
	b, _, err := proctest.Get(url)
	return b, err
}

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

// everySecond is an @every 1s job with the default misfire policy
// (latest): a fire time the cluster misses while leadership changes hands
// would show as a skipped run, or as no run at all.
const everySecond = `  - name: second
    schedule: "@every 1s"
    command: ["/bin/true"]
    overlap: allow
    lease_ttl: 3s
    timeout: 10s
`

// TestCluster_PlannedStopLosesNoFireTime stops the leader with SIGTERM five
// times, restarting it each time, then restarts every server one at a
// time (a rolling restart), and checks through the API that every second
// of the whole time was granted exactly once: the stopping leader hands
// leadership over first, so none is lost and none is granted twice. The
// time the hand-over takes is measured by `fencebench failover -signal
// term`, not here.
func TestCluster_PlannedStopLosesNoFireTime(t *testing.T) {
	// Alone, not in parallel (see the package comment): no fire time lost.
	c := startCluster(t, localcluster.Options{Servers: 3, StoreNode: true, Jobs: everySecond})
	a := agree(t, c, 30*time.Second)
	// Wait for the schedule to run; the window checked starts after it.
	var first time.Time
	if err := localcluster.Until(30*time.Second, func() error {
		runs, err := c.Node(a.Leader).Runs("second", 5)
		if err != nil || len(runs) == 0 {
			return fmt.Errorf("no run yet (%v)", err)
		}
		first = runs[0].ScheduledAt.Add(time.Second)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	restart := func(n *localcluster.Node) {
		t.Helper()
		if err := n.Terminate(15 * time.Second); err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if !strings.Contains(n.LogTail(20000), "stopped") {
			t.Fatalf("%s did not stop cleanly", n.Name)
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		agree(t, c, 30*time.Second)
		if err := localcluster.Until(30*time.Second, func() error {
			st, err := n.Status()
			if err != nil {
				return err
			}
			if st.Leader == "" || (st.RaftState != "Follower" && st.RaftState != "Leader") {
				return fmt.Errorf("%s: %s, leader %q", n.Name, st.RaftState, st.Leader)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for round := 1; round <= 5; round++ {
		before := agree(t, c, 30*time.Second)
		restart(c.Node(before.Leader))
		after := agree(t, c, 30*time.Second)
		if after.Epoch <= before.Epoch || after.Leader == before.Leader {
			t.Fatalf("round %d: leader %s epoch %d before, %s epoch %d after: leadership did not move", round, before.Leader, before.Epoch, after.Leader, after.Epoch)
		}
		if !strings.Contains(c.Node(before.Leader).LogTail(200000), "planned stop: handed leadership over") {
			t.Fatalf("round %d: %s did not hand leadership over", round, before.Leader)
		}
	}
	for _, n := range c.Servers() {
		restart(n)
	}

	// Every second from first to a moment ago: exactly one run, granted.
	last := time.Now().Add(-2 * time.Second).Truncate(time.Second)
	var runs []jobs.Run
	if err := localcluster.Until(20*time.Second, func() error {
		a := agree(t, c, 30*time.Second)
		var err error
		runs, err = c.Node(a.Leader).Runs("second", 2000)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bySecond := map[time.Time][]jobs.Run{}
	for _, r := range runs {
		bySecond[r.ScheduledAt.UTC()] = append(bySecond[r.ScheduledAt.UTC()], r)
	}
	var problems []string
	for s := first.UTC(); !s.After(last); s = s.Add(time.Second) {
		rs := bySecond[s]
		switch {
		case len(rs) == 0:
			problems = append(problems, fmt.Sprintf("%s: no run", s.Format(time.TimeOnly)))
		case len(rs) > 1:
			problems = append(problems, fmt.Sprintf("%s: %d runs", s.Format(time.TimeOnly), len(rs)))
		case rs[0].State == jobs.Skipped || len(rs[0].Attempts) == 0:
			problems = append(problems, fmt.Sprintf("%s: %s, not granted (%s)", s.Format(time.TimeOnly), rs[0].State, rs[0].Reason))
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Fatalf("from %s to %s (%d seconds), fire times lost or doubled:\n%s", first.Format(time.TimeOnly), last.Format(time.TimeOnly), int(last.Sub(first)/time.Second)+1, strings.Join(problems, "\n"))
	}
	t.Logf("%d seconds from %s to %s, each granted once", int(last.Sub(first)/time.Second)+1, first.Format(time.TimeOnly), last.Format(time.TimeOnly))
}

// TestCluster_PlannedStopWithAPausedFollower: a leader told to stop while
// a follower is paused (SIGSTOP: its connections stay open and nothing
// on them is answered) stops cleanly: the requests it has in flight to
// the paused node end with the stop, instead of holding it for their
// whole timeout until the node gives up on its own parts.
func TestCluster_PlannedStopWithAPausedFollower(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, Jobs: everySecond})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	var paused *localcluster.Node
	for _, n := range c.Servers() {
		if n != leader {
			paused = n
			break
		}
	}
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	defer paused.Resume()
	// The leader has noticed: its requests to the paused node go unanswered.
	if err := localcluster.Until(30*time.Second, func() error {
		if !strings.Contains(leader.LogTail(100000), "failed to contact: server-id="+paused.Name) {
			return fmt.Errorf("%s has not missed %s yet", leader.Name, paused.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := leader.Terminate(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	log := leader.LogTail(100000)
	if !strings.Contains(log, "msg=stopped") || strings.Contains(log, "did not stop within the budget") {
		stacks, _ := os.ReadFile(filepath.Join(leader.DataDir, "shutdown-goroutines.txt"))
		t.Fatalf("%s did not stop cleanly (exit took %s):\n%s\n--- its goroutines ---\n%s", leader.Name, took.Round(time.Millisecond), log, stacks)
	}
	t.Logf("%s stopped cleanly in %s with %s paused", leader.Name, took.Round(time.Millisecond), paused.Name)
}

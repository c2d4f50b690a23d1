package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// preJobs fire every three seconds on the two workers; each process
// appends its attempt and start time to $STARTS, so the test counts the
// processes that really started, whatever the cluster recorded. The lease
// TTL of 8s makes the lead 500 ms (pregrant.go) and leaves a leader killed
// before the fire time room to be replaced on a busy machine. No retries: a takeover
// of a run that never started must not need one (startconfirm.go).
func preJobs(starts string) string {
	return fmt.Sprintf(`  - name: pre
    schedule: "*/3 * * * * *"
    target: {role: worker}
    shell: 'echo "$FENCECRON_ATTEMPT $(date +%%s.%%N)" >> "$STARTS"; echo "$FENCECRON_ATTEMPT"'
    env: {STARTS: %q}
    output: 'pre/{{ .Scheduled.Format "150405" }}.txt'
    overlap: forbid
    lease_ttl: 8s
    retries: 0
    timeout: 20s
`, starts)
}

// A run granted ahead of its fire time runs exactly once when, before its
// fire time, (1) the worker it was granted to is SIGKILLed: its short
// lease before the start runs out and another worker takes it over with a
// newer token, late by that lease, though the job has no retries (the leader never confirmed
// the dead worker's start, so its attempt never started); (2) the worker
// is stopped (SIGTERM): it gives the run up and says it never started
// it, and another worker runs it at once, without a retry; (3) the
// leader is SIGKILLed: the worker keeps it, starts it once the new leader
// confirms the start (late by the failover at most), and the new leader
// grants that time to nobody else. "Once" is counted three ways: the
// processes that started (a file each appends to), the run's attempts,
// and the store's history of the run's key.
func TestCluster_PreGrantedRunSurvivesKills(t *testing.T) {
	// Alone, not in parallel (see the package comment): lateness bounds.
	starts := filepath.Join(t.TempDir(), "starts")
	c := startCluster(t, localcluster.Options{
		Servers: 3, Workers: 2, StoreNode: true,
		Tags: map[string]map[string]string{"w1": {"role": "worker"}, "w2": {"role": "worker"}},
		Jobs: preJobs(starts),
	})
	a := agree(t, c, 30*time.Second)
	waitAlive(t, c.Node(a.Leader), "w1", "w2")

	t.Run("worker killed before the fire time", func(t *testing.T) {
		// Late by the takeover: the short lease before the start (1s)
		// running out, a lease tick, the new grant and its start, with
		// room for a busy machine (prestart_test.go holds it to 1.5s).
		workerGoneBeforeFire(t, c, starts, sigkill, 5*time.Second)
	})
	t.Run("worker stopped before the fire time", func(t *testing.T) {
		// A planned stop (SIGTERM, as systemd sends): no lease to wait
		// out, the retry is granted as soon as the worker's word is
		// applied (a few seconds' slack for a busy machine).
		workerGoneBeforeFire(t, c, starts, syscall.SIGTERM, 4*time.Second)
	})

	t.Run("leader killed before the fire time", func(t *testing.T) {
		old := c.Node(agree(t, c, 20*time.Second).Leader)
		run, _ := actBeforeFire(t, c, old, beforeFire{victimOf: func(jobs.Run) *localcluster.Node { return old }, act: stopWith(sigkill)})
		leader := c.Node(agree(t, c, 20*time.Second).Leader)
		run = waitRun(t, leader, run.ID, 30*time.Second, runEnded)
		if run.State != jobs.Succeeded || len(run.Attempts) != 1 {
			t.Fatalf("run %s: %s with attempts %+v; want succeeded by its one attempt", run.ID, run.State, run.Attempts)
		}
		started := onlyStart(t, starts, run, run.Attempts[0].ID)
		// The worker starts it once a leader confirmed the start: the new
		// one, if the old died before the worker asked, so late by the
		// failover at most (an election, with room for a busy machine).
		if late := started.Sub(run.ScheduledAt); late < 0 || late > 5*time.Second {
			t.Errorf("started %s after the scheduled time; want late by the failover at most", late)
		}
		t.Logf("started %s after its scheduled time", started.Sub(run.ScheduledAt).Round(time.Millisecond))
		onlyApplied(t, leader, run, run.Attempts[0])
		if err := old.Start(); err != nil {
			t.Fatal(err)
		}
	})
}

// workerGoneBeforeFire sends sig to the worker of a run of pre granted
// ahead before its fire time, and checks that the run succeeded once, on
// the other worker, started no later than within after its scheduled
// time, with the gone worker's attempt never started: by the leader's
// word when it was killed (its lease expired), by its own when it was
// stopped. The worker is started again.
func workerGoneBeforeFire(t *testing.T, c *localcluster.Cluster, starts string, sig syscall.Signal, within time.Duration) {
	t.Helper()
	leader := c.Node(agree(t, c, 20*time.Second).Leader)
	run, victim := actBeforeFire(t, c, leader, beforeFire{victimOf: workerOf(c), act: stopWith(sig)})
	run = waitRun(t, leader, run.ID, 30*time.Second, runEnded)
	if run.State != jobs.Succeeded || len(run.Attempts) != 2 {
		t.Fatalf("run %s: %s with attempts %+v; want succeeded by a second attempt", run.ID, run.State, run.Attempts)
	}
	first, second := run.Attempts[0], run.Attempts[1]
	// A killed worker's attempt ends by its short lease running out; a
	// stopped one's by its own word, unless on a busy machine the short
	// lease (1 s) runs out first: either way never started.
	if first.Worker != victim.Name || first.State != jobs.Lost || !first.NeverStarted || (sig == sigkill && !first.Expired) || second.Worker == victim.Name || !fence(first.Token).Less(fence(second.Token)) {
		t.Errorf("attempts %+v: want %s's lost and never started (expired: %v), then another worker's with a newer token", run.Attempts, victim.Name, sig == sigkill)
	}
	started := onlyStart(t, starts, run, second.ID)
	if late := started.Sub(run.ScheduledAt); late < 0 || late > within {
		t.Errorf("the second attempt started %s after the scheduled time; want after it, within %s", late, within)
	}
	onlyApplied(t, leader, run, second)
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, leader, victim.Name)
}

// runEnded is nil once r is in a terminal state (for waitRun).
func runEnded(r jobs.Run) error {
	if !r.State.Terminal() {
		return fmt.Errorf("state %s", r.State)
	}
	return nil
}

// sigkill is SIGKILL: stopWith kills the node's process group.
const sigkill = syscall.SIGKILL

// beforeFire is a fault actBeforeFire plants.
type beforeFire struct {
	// victimOf names the node to act on for the run found.
	victimOf func(jobs.Run) *localcluster.Node
	// before is how long before the run's fire time to act (0: at once).
	before time.Duration
	// act is the fault; it returns once it took effect (the node exited,
	// or is stopped).
	act func(*localcluster.Node) error
	// only, if set, is which runs to act on; the others are let be.
	only func(jobs.Run) bool
}

// stopWith returns the act of sending sig (SIGKILL kills the node's
// process group) and waiting for the node to exit.
func stopWith(sig syscall.Signal) func(*localcluster.Node) error {
	return func(n *localcluster.Node) error {
		if sig == sigkill {
			n.Kill()
			return nil
		}
		if err := n.Signal(sig); err != nil {
			return err
		}
		// A planned stop takes its time; the node is gone when it ends.
		return n.WaitExit(30 * time.Second)
	}
}

// workerOf is the victim of a fault on a run's holder.
func workerOf(c *localcluster.Cluster) func(jobs.Run) *localcluster.Node {
	return func(r jobs.Run) *localcluster.Node { return c.Node(r.Attempts[0].Worker) }
}

// actBeforeFire waits for a run of pre granted ahead (pending, its fire
// time still to come), plants fault f on the node it names, and returns
// the run and the node once the fault came before the fire time, ahead of
// the worker's start request (25-100 ms ahead) with room. One that came too
// late (a busy machine) proves nothing: the node is started (or resumed)
// again and the next run is tried, a few times at most.
func actBeforeFire(t *testing.T, c *localcluster.Cluster, leader *localcluster.Node, f beforeFire) (jobs.Run, *localcluster.Node) {
	t.Helper()
	const room = 150 * time.Millisecond
	wait := 20 * time.Second
	if f.only != nil {
		wait = time.Minute // a run every 3 s, each on one of a few nodes
	}
	for try := 1; try <= 4; try++ {
		var run jobs.Run
		if err := localcluster.UntilEvery(wait, 10*time.Millisecond, func() error {
			runs, err := leader.Runs("pre", 20)
			if err != nil {
				return err
			}
			for _, r := range runs {
				if r.ScheduledAt.After(time.Now().Add(max(f.before, room)+50*time.Millisecond)) && r.State == jobs.Pending && len(r.Attempts) == 1 && (f.only == nil || f.only(r)) {
					run = r
					return nil
				}
			}
			return fmt.Errorf("no run of pre granted ahead yet")
		}); err != nil {
			t.Fatal(err)
		}
		victim := f.victimOf(run)
		if f.before > 0 {
			// The fault's own schedule, not a wait for something to settle.
			time.Sleep(time.Until(run.ScheduledAt.Add(-f.before)))
		}
		at := time.Now()
		if err := f.act(victim); err != nil {
			t.Fatalf("%s: %v", victim.Name, err)
		}
		if early := run.ScheduledAt.Sub(at); early > room {
			t.Logf("try %d: acted on %s %s before %s's fire time", try, victim.Name, early.Round(time.Millisecond), run.ID)
			return run, victim
		}
		t.Logf("try %d: acted on %s only %s before %s's fire time; again", try, victim.Name, run.ScheduledAt.Sub(at).Round(time.Millisecond), run.ID)
		if victim.Running() {
			victim.Resume()
		} else if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		leader = c.Node(agree(t, c, 20*time.Second).Leader)
		waitAlive(t, leader, "w1", "w2")
	}
	t.Fatal("never acted on a node before the fire time of a run granted ahead")
	return jobs.Run{}, nil
}

// onlyStart returns when the one process of run started, checking that
// exactly one did, by attempt want.
func onlyStart(t *testing.T, starts string, run jobs.Run, want string) time.Time {
	t.Helper()
	b, err := os.ReadFile(starts)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, run.ID+".") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("run %s started %d processes (%q), want 1", run.ID, len(lines), lines)
	}
	attempt, at, _ := strings.Cut(lines[0], " ")
	if attempt != want {
		t.Errorf("run %s's process was attempt %s's, want %s's", run.ID, attempt, want)
	}
	secs, err := strconv.ParseFloat(at, 64)
	if err != nil {
		t.Fatalf("start time %q: %v", at, err)
	}
	return time.Unix(0, int64(secs*1e9))
}

// onlyApplied checks the store's history of run's key: one write
// applied, by attempt a with its token.
func onlyApplied(t *testing.T, n *localcluster.Node, run jobs.Run, a jobs.Attempt) {
	t.Helper()
	var applied []fencedstore.Decision
	for _, d := range history(t, n, run.Output) {
		if d.Outcome == fencedstore.Applied {
			applied = append(applied, d)
		}
	}
	if len(applied) != 1 || applied[0].Attempt != a.ID || applied[0].Token != fence(a.Token) {
		t.Errorf("history of %s: applied %+v; want one write, by %s with %s", run.Output, applied, a.ID, a.Token)
	}
}

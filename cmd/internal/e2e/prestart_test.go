package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// shortJobs is preJobs with the lease_ttl of 5s the issue measured with:
// the short lease before a start is then 1 s (a third, at most a second)
// and the lead 500 ms.
func shortJobs(starts string) string {
	return strings.Replace(preJobs(starts), "lease_ttl: 8s", "lease_ttl: 5s", 1)
}

// The short lease before a start (scheduler/fsm/prestart.go), with real
// processes: a worker holding a run granted ahead that is SIGKILLed
// 200 ms before the fire time is replaced by a newer token within 1.5 s
// of it, and the run happens once; one SIGSTOPped across its fire time
// never starts the work after SIGCONT. "Once" and "never" are read from
// the processes that started (each appends its attempt to a file), the
// run's attempts, and the store's history of the run's key.
func TestCluster_ShortLeaseBeforeTheStart(t *testing.T) {
	// Alone, not in parallel (see the package comment): lateness bounds.
	starts := filepath.Join(t.TempDir(), "starts")
	c := startCluster(t, localcluster.Options{
		Servers: 1, Workers: 2, StoreNode: true,
		Tags: map[string]map[string]string{"w1": {"role": "worker"}, "w2": {"role": "worker"}},
		Jobs: shortJobs(starts),
	})
	leader := c.Node(agree(t, c, 30*time.Second).Leader)
	waitAlive(t, leader, "w1", "w2")

	t.Run("holder killed 200ms before the fire time", func(t *testing.T) {
		run, victim := actBeforeFire(t, c, leader, beforeFire{victimOf: workerOf(c), before: 200 * time.Millisecond, act: stopWith(sigkill)})
		run = waitRun(t, leader, run.ID, 30*time.Second, runEnded)
		first, second := takenOver(t, run, victim)
		if !first.Expired {
			t.Errorf("first attempt %+v: want expired by the leader", first)
		}
		// Replaced: the newer token granted within 1.5 s of the fire time.
		late := second.GrantedAt.Sub(run.ScheduledAt)
		t.Logf("takeover granted %s after the fire time", late.Round(time.Millisecond))
		if late > 1500*time.Millisecond {
			t.Errorf("the takeover was granted %s after the fire time; want within 1.5s", late)
		}
		started := onlyStart(t, starts, run, second.ID)
		t.Logf("its process started %s after the fire time", started.Sub(run.ScheduledAt).Round(time.Millisecond))
		onlyApplied(t, leader, run, second)
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		waitAlive(t, leader, victim.Name)
	})

	t.Run("holder stopped across the fire time", func(t *testing.T) {
		run, victim := actBeforeFire(t, c, leader, beforeFire{victimOf: workerOf(c), before: 200 * time.Millisecond, act: (*localcluster.Node).Pause})
		resumed := false
		defer func() {
			if !resumed {
				victim.Resume()
			}
		}()
		// Stopped across the fire time for longer than the short lease
		// and far less than the job's lease_ttl: with the whole lease, the
		// holder would wake up with a lease it could start on. The
		// fault's own schedule, not a wait for something to settle.
		time.Sleep(time.Until(run.ScheduledAt.Add(1500 * time.Millisecond)))
		if !victim.Stopped() {
			t.Fatalf("%s is not stopped", victim.Name)
		}
		if err := victim.Resume(); err != nil {
			t.Fatal(err)
		}
		resumed = true
		// The woken holder reports what it did with its attempt: its
		// account replaces the leader's in the record. It lost the lease
		// before the start, or (its lease left to be confirmed with the
		// start) never had it confirmed.
		run = waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
			if err := runEnded(r); err != nil || len(r.Attempts) < 2 {
				return err // ended by its one attempt: takenOver says what went wrong
			}
			if e := r.Attempts[0].Error; !strings.Contains(e, "lease lost before the start") && !strings.Contains(e, "lease not confirmed") {
				return fmt.Errorf("first attempt's record %q: %s has not reported it", e, victim.Name)
			}
			return nil
		})
		first, second := takenOver(t, run, victim)
		t.Logf("the woken holder's record: %s", first.Error)
		onlyStart(t, starts, run, second.ID)
		onlyApplied(t, leader, run, second)
		for _, d := range history(t, leader, run.Output) {
			if d.Attempt == first.ID && d.Outcome != fencedstore.Established {
				t.Errorf("the woken holder's attempt reached the store after its establish: %+v", d)
			}
		}
	})
}

// takenOver checks that run succeeded by a second attempt on another
// worker with a newer token, the first (victim's) lost and never started,
// and returns both.
func takenOver(t *testing.T, run jobs.Run, victim *localcluster.Node) (first, second jobs.Attempt) {
	t.Helper()
	if run.State != jobs.Succeeded || len(run.Attempts) != 2 {
		t.Fatalf("run %s: %s with attempts %+v; want succeeded by a second attempt", run.ID, run.State, run.Attempts)
	}
	first, second = run.Attempts[0], run.Attempts[1]
	if first.Worker != victim.Name || first.State != jobs.Lost || !first.NeverStarted || !first.StartedAt.IsZero() || second.Worker == victim.Name || !fence(first.Token).Less(fence(second.Token)) {
		t.Errorf("attempts %+v: want %s's lost and never started, then another worker's with a newer token", run.Attempts, victim.Name)
	}
	return first, second
}

// The leader is also the worker that holds a run granted ahead, and is
// SIGKILLed 200 ms before the fire time: both the run's holder and the
// only memory of what the old term confirmed die together. The start of
// a run granted ahead is confirmed in the log, so the new leader knows
// nobody let it start; its dispatch to the dead node fails, so the run
// holds the short lease from its grant, and is taken over within 1.5 s
// of the fire time, once.
func TestCluster_LeaderHoldingARunGrantedAheadKilled(t *testing.T) {
	// Alone, not in parallel (see the package comment): lateness bounds.
	starts := filepath.Join(t.TempDir(), "starts")
	worker := map[string]string{"role": "worker"}
	c := startCluster(t, localcluster.Options{
		Servers: 3, StoreNode: true,
		Tags: map[string]map[string]string{"n1": worker, "n2": worker, "n3": worker},
		Jobs: shortJobs(starts),
	})
	old := c.Node(agree(t, c, 30*time.Second).Leader)
	heldByLeader := func(r jobs.Run) bool { return r.Attempts[0].Worker == old.Name }
	run, _ := actBeforeFire(t, c, old, beforeFire{
		victimOf: func(jobs.Run) *localcluster.Node { return old },
		only:     heldByLeader, before: 200 * time.Millisecond, act: stopWith(sigkill),
	})
	leader := c.Node(agree(t, c, 20*time.Second).Leader)
	run = waitRun(t, leader, run.ID, 30*time.Second, runEnded)
	first, second := takenOver(t, run, old)
	late := second.GrantedAt.Sub(run.ScheduledAt)
	t.Logf("the dead leader's run was taken over by %s, granted %s after the fire time", second.Worker, late.Round(time.Millisecond))
	if late > 1500*time.Millisecond {
		t.Errorf("the takeover was granted %s after the fire time; want within 1.5s", late)
	}
	if first.StartConfirmed {
		t.Errorf("the dead leader's attempt %+v: its start is confirmed in the log; want never", first)
	}
	started := onlyStart(t, starts, run, second.ID)
	t.Logf("its process started %s after the fire time", started.Sub(run.ScheduledAt).Round(time.Millisecond))
	onlyApplied(t, leader, run, second)
}

package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// The leader takes a lease that ran out for an attempt that never
// started when its worker confirms starts and never asked for this one;
// once it confirmed the start, the expiry counts.
func TestLeader_ExpiryWithoutAStartConfirmationIsNotCounted(t *testing.T) {
	s := spec("j", jobs.MisfireLatest, jobs.OverlapAllow) // retries: 0
	s.LeaseTTL = jobs.Duration(time.Second)
	l, sm := newTestLeader(t, s)
	run, err := l.fire(s, base.Add(time.Second), "schedule", false)
	if err != nil {
		t.Fatal(err)
	}
	// Time passes beyond every lease, short or whole.
	runOut := func() {
		l.s.Clock = fixedClock{l.s.Clock.Now().Add(time.Minute)}
		l.checkLeases()
	}
	// The worker confirmed its lease, waiting for the fire time, and died.
	if r, _ := renewOne(l, worker.Renewal{Attempt: run.Attempts[0].ID, Confirming: true}, "n1"); !r.Held || r.Started {
		t.Fatalf("renewal without a start: %+v; want held, not started", r)
	}
	runOut()
	got, _ := sm.Run(run.ID)
	if len(got.Attempts) != 2 || !got.Attempts[0].NeverStarted || got.State != jobs.Pending {
		t.Fatalf("after the lease ran out unstarted: run %s, attempts %+v; want the first never started and a takeover", got.State, got.Attempts)
	}
	if r, _ := renewOne(l, worker.Renewal{Attempt: got.Attempts[0].ID, Start: true, Confirming: true}, "n1"); r.Held || r.Started {
		t.Errorf("the expired attempt's start was confirmed: %+v", r)
	}
	// The takeover's worker starts it, then dies: that expiry counts.
	if r, _ := renewOne(l, worker.Renewal{Attempt: got.Attempts[1].ID, Start: true, Confirming: true}, "n1"); !r.Held || !r.Started {
		t.Fatalf("the takeover's start: %+v; want held and started", r)
	}
	runOut()
	got, _ = sm.Run(run.ID)
	if len(got.Attempts) != 2 || got.Attempts[1].NeverStarted || got.State != jobs.Lost {
		t.Errorf("after the started takeover's lease ran out: run %s, attempts %+v; want lost, counted", got.State, got.Attempts)
	}

	// A worker that died before its first renewal said nothing; its
	// node's gossip says whether it confirms starts.
	for _, confirms := range []bool{false, true} {
		l.s.Raft.(*fakeRaft).confirms = confirms
		run, err := l.fire(s, base.Add(time.Duration(2+btoi(confirms))*time.Second), "schedule", false)
		if err != nil {
			t.Fatal(err)
		}
		runOut()
		got, _ := sm.Run(run.ID)
		if got.Attempts[0].NeverStarted != confirms || len(got.Attempts) != 1+btoi(confirms) {
			t.Errorf("gossip says confirms starts %v, no renewal: attempts %+v; want never started %v", confirms, got.Attempts, confirms)
		}
	}

	// An attempt granted before the leader loop's election entry may
	// have had its start confirmed by an earlier loop: its expiry counts.
	run, err = l.fire(s, base.Add(5*time.Second), "schedule", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.s.applyLocalCmd(t.Context(), replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: base}}); err != nil {
		t.Fatal(err)
	}
	runOut()
	got, _ = sm.Run(run.ID)
	if len(got.Attempts) != 1 || got.Attempts[0].NeverStarted || strings.Contains(got.Attempts[0].Error, "never started") || got.State != jobs.Lost {
		t.Errorf("an attempt granted before the election entry: run %s, attempts %+v; want lost, counted, and not said to be never started", got.State, got.Attempts)
	}
}

// The leader confirms a start only while nothing can have taken the run
// from the worker: not while the attempt's expiry as never started is on
// its way to the log, and not from a loop whose election entry is no
// longer the last one (a newer leader's grants may be the ones asked
// about). A renewal from a worker that does not confirm starts counts as
// a start: such a worker may start on any renewal answered Held.
func TestLeader_ConfirmsAStartOnlyWhileItsTermLasts(t *testing.T) {
	s := spec("j", jobs.MisfireLatest, jobs.OverlapAllow) // retries: 0
	s.LeaseTTL = jobs.Duration(time.Second)
	l, sm := newTestLeader(t, s)
	l.s.Raft.(*fakeRaft).confirms = true
	fire := func(at time.Duration) jobs.Attempt {
		t.Helper()
		run, err := l.fire(s, base.Add(at), "schedule", false)
		if err != nil {
			t.Fatal(err)
		}
		return run.Attempts[0]
	}

	a := fire(time.Second)
	l.mu.Lock()
	l.unstarted[a.ID] = true // checkLeases took it; its expiry is not yet applied
	l.mu.Unlock()
	if r, err := renewOne(l, worker.Renewal{Attempt: a.ID, Start: true, Confirming: true}, "n1"); err != nil || r.Held || r.Started {
		t.Errorf("a start asked while the expiry is pending: %+v, %v; want a definite no", r, err)
	}
	if r, err := renewOne(l, worker.Renewal{Attempt: a.ID, Confirming: true}, "n1"); err != nil || !r.Held {
		t.Errorf("a plain renewal while the expiry is pending: %+v, %v; want held, as before", r, err)
	}
	// A renewal without Confirming may be followed by a start: refused.
	if r, err := renewOne(l, worker.Renewal{Attempt: a.ID}, "n1"); err != nil || r.Held {
		t.Errorf("an older worker's renewal while the expiry is pending: %+v, %v; want a definite no", r, err)
	}

	// An older worker's renewal, without Confirming: its lease running
	// out proves nothing about a start.
	b := fire(2 * time.Second)
	if r, err := renewOne(l, worker.Renewal{Attempt: b.ID}, "n1"); err != nil || !r.Held {
		t.Fatalf("an older worker's renewal: %+v, %v", r, err)
	}
	l.mu.Lock()
	l.leases[b.ID].deadline = base.Add(-time.Millisecond)
	l.mu.Unlock()
	l.checkLeases()
	if got, _ := sm.Run(jobs.RunID("j", base.Add(2*time.Second))); len(got.Attempts) != 1 || got.Attempts[0].NeverStarted || got.State != jobs.Lost {
		t.Errorf("the older worker's lease ran out: run %s, attempts %+v; want lost, counted", got.State, got.Attempts)
	}

	// A newer election entry: this loop's term is over.
	c := fire(3 * time.Second)
	if _, err := l.s.applyLocalCmd(t.Context(), replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n2", At: base}}); err != nil {
		t.Fatal(err)
	}
	if r, err := renewOne(l, worker.Renewal{Attempt: c.ID, Start: true, Confirming: true}, "n1"); !errors.Is(err, jobs.ErrNotLeader) || r.Held {
		t.Errorf("a start asked of a loop whose term is over: %+v, %v; want %v", r, err, jobs.ErrNotLeader)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

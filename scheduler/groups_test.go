package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A leader grants the first attempt of a run its group admitted, and so
// does a new leader that finds an admitted run in the state (its
// predecessor died between the entry that admitted it and the grant).
func TestLeader_GrantsAdmittedRuns(t *testing.T) {
	specs := groupSpecs(1, 5, "a", "b")
	l, sm := newTestLeader(t, specs...)
	specA, _ := sm.Spec("a")
	specB, _ := sm.Spec("b")
	runA, err := l.fire(specA, base, "schedule", false)
	if err != nil || len(runA.Attempts) != 1 {
		t.Fatalf("fire a: %v %+v", err, runA)
	}
	runB, err := l.fire(specB, base.Add(time.Second), "schedule", false)
	if err != nil || !jobs.IsWaiting(runB) {
		t.Fatalf("fire b: %v, %s %q; want waiting", err, runB.State, runB.Reason)
	}
	a, _ := runA.Latest()
	code := 0
	if _, err := l.s.applyLocalCmd(l.ctx, replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: a.ID, State: jobs.Succeeded, ExitCode: &code, EndedAt: base}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := sm.Run(runB.ID); !fsm.IsAdmitted(got) {
		t.Fatalf("b: %s %q; want admitted", got.State, got.Reason)
	}
	// A new term recovers: the admitted run gets its retry timer, due now.
	next := newLeader(l.s, l.ctx)
	t.Cleanup(next.wg.Wait)
	next.recover()
	next.checkRetries()
	got, _ := sm.Run(runB.ID)
	att, ok := got.Latest()
	if !ok || att.Worker != "n1" || !newerFence(att.Token, a.Token) {
		t.Fatalf("b after the new leader's recovery: %+v; want its first attempt, a newer token than %s", got, a.Token)
	}
	d := l.s.Dispatcher.(*recordingDispatcher)
	if err := pollFor(5*time.Second, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, s := range d.sent {
			if s.Attempt.ID == att.ID {
				return true
			}
		}
		return false
	}); err != nil {
		t.Errorf("the admitted run's attempt was never dispatched")
	}
	// Granted once: a second pass changes nothing.
	next.scheduleRetry(got)
	next.checkRetries()
	if again, _ := sm.Run(runB.ID); len(again.Attempts) != 1 {
		t.Errorf("b has %d attempts after a second pass, want 1", len(again.Attempts))
	}
}

func newerFence(a, b jobs.Fence) bool {
	return a.Epoch > b.Epoch || (a.Epoch == b.Epoch && a.Seq > b.Seq)
}

func pollFor(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

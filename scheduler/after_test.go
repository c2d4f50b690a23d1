package scheduler

import (
	"fmt"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// The leader dispatches a run the FSM granted because its parents
// succeeded, whether it hears of it (ChangeGranted) or finds it after a
// resync, once.
func TestLeader_DispatchesFollowers(t *testing.T) {
	for _, ch := range []fsm.ChangeKind{fsm.ChangeGranted, fsm.ChangeResync} {
		l, sm := newTestLeader(t,
			jobs.Spec{Name: "a", Schedules: []string{"@daily"}, Shell: "true"},
			jobs.Spec{Name: "b", After: []string{"a"}, Shell: "true"})
		res, err := l.s.applyLocalCmd(l.ctx, grant("a", t0))
		if err != nil {
			t.Fatal(err)
		}
		fc := l.followWorkers([]string{res.Run.ID})
		if fc.Workers["b"] != "n1" {
			t.Fatalf("follow workers = %v, want b on n1", fc.Workers)
		}
		c := complete(res.Run.Attempts[0].ID, jobs.Succeeded, 0, fc.Workers)
		if _, err := l.s.applyLocalCmd(l.ctx, c); err != nil {
			t.Fatal(err)
		}
		b, ok := sm.Run(jobs.RunID("b", t0))
		if !ok {
			t.Fatal("b not granted")
		}
		l.onChanges([]fsm.Change{{Kind: ch, Run: b.ID, Attempt: b.Attempts[0].ID}})
		l.onChanges([]fsm.Change{{Kind: ch, Run: b.ID, Attempt: b.Attempts[0].ID}})
		d := l.s.Dispatcher.(*recordingDispatcher)
		waitFor(t, "b dispatched", func() error {
			l.mu.Lock()
			busy := len(l.inflight)
			l.mu.Unlock()
			d.mu.Lock()
			defer d.mu.Unlock()
			if busy > 0 {
				return fmt.Errorf("%d dispatches in flight", busy)
			}
			var n int
			for _, a := range d.sent {
				if a.Run.ID == b.ID {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("b dispatched %d times (change %d)", n, ch)
			}
			return nil
		})
	}
}

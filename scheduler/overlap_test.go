package scheduler

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Firing goroutines and manual triggers propose at once; whatever the
// interleaving, a forbid job never has two open runs, and every refused
// time is recorded as skipped with the reason.
func TestLeader_ConcurrentFiresOfAForbidJob(t *testing.T) {
	js := spec("j", jobs.MisfireLatest, jobs.OverlapForbid)
	l, sm := newTestLeader(t, js)
	js.Normalize()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				at := base.Add(time.Duration(g*20+i) * time.Millisecond)
				run, err := l.fire(js, at, "manual", false)
				if err != nil {
					t.Error(err)
					return
				}
				if run.State == jobs.Skipped && !strings.Contains(run.Reason, "overlap: forbid") {
					t.Errorf("skipped %s: %q, want the overlap reason", run.ID, run.Reason)
				}
				if i%5 == 0 {
					// End whatever is open, as a worker would.
					for _, r := range sm.OpenRuns("j") {
						if a, ok := r.Latest(); ok {
							l.s.Complete(context.Background(), replicated.Completion{Attempt: a.ID, State: jobs.Succeeded, EndedAt: base})
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	// From the audit trail: each run is open from the entry that granted
	// it to the entry that ended it; no two such spans may overlap.
	type span struct{ from, to uint64 }
	spans := map[string]*span{}
	for _, e := range sm.Events(0, 0) {
		switch e.Kind {
		case jobs.EventGranted:
			spans[e.Run] = &span{from: e.Index, to: ^uint64(0)}
		case jobs.EventCompleted:
			spans[e.Run].to = e.Index
		}
	}
	for a, sa := range spans {
		for b, sb := range spans {
			if a < b && sa.from < sb.to && sb.from < sa.to {
				t.Errorf("runs %s (entries %d-%d) and %s (%d-%d) were open at once", a, sa.from, sa.to, b, sb.from, sb.to)
			}
		}
	}
	runs := sm.Runs(fsm.RunFilter{Job: "j"})
	granted, skipped := 0, 0
	for _, r := range runs {
		if r.State == jobs.Skipped {
			skipped++
		} else {
			granted++
		}
	}
	if len(runs) != 160 || granted < 2 || skipped == 0 {
		t.Errorf("%d runs (%d granted, %d skipped), want all 160 recorded, some of each", len(runs), granted, skipped)
	}
}

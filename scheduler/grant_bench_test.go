package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// discardDispatcher takes every assignment and keeps none.
type discardDispatcher struct{}

func (discardDispatcher) Dispatch(context.Context, string, worker.Assignment) error { return nil }
func (discardDispatcher) DispatchMany(context.Context, string, []worker.Assignment) error {
	return nil
}

// BenchmarkLeader_GrantAndDispatch is the leader's path from a fire time
// to its dispatch: choose a worker, apply the grant (a one-node fake
// Raft), log it, start the lease, hand the assignment to the dispatcher.
// With tracing off it must allocate what it did before tracing existed
// (compare with `benchstat` against the commit before tracing).
func BenchmarkLeader_GrantAndDispatch(b *testing.B) {
	benchGrantAndDispatch(b, nil)
}

func benchGrantAndDispatch(b *testing.B, setup func(*Scheduler)) {
	js := spec("j", jobs.MisfireAll, jobs.OverlapAllow)
	l, _ := newTestLeader(b, js)
	l.s.Dispatcher = discardDispatcher{}
	if setup != nil {
		setup(l.s)
	}
	at := base
	b.ReportAllocs()
	for b.Loop() {
		at = at.Add(time.Second)
		if _, err := l.fire(js, at, "schedule", false); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	l.wg.Wait()
}

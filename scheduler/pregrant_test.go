package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// The leader grants a run ahead of its fire time and moves the job to its
// next time; a job whose run may not be granted ahead (an open run under
// forbid) keeps its time, to be granted when it comes. A new leader's
// queue starts after the time granted ahead.
func TestLeader_GrantsAhead(t *testing.T) {
	allow, forbid := spec("allow", jobs.MisfireLatest, jobs.OverlapAllow), spec("forbid", jobs.MisfireLatest, jobs.OverlapForbid)
	l, sm := newTestLeader(t, allow, forbid)
	// forbid has a run still open.
	l.s.Clock = fixedClock{base}
	if _, err := l.fire(forbid, base, "schedule", false); err != nil {
		t.Fatal(err)
	}
	fireAt := base.Add(time.Second)
	l.s.Clock = fixedClock{fireAt.Add(-worker.PreGrantLead / 2)}
	q := fireQueue{due(t, allow, base), due(t, forbid, base)}
	for _, e := range q {
		e.lead = worker.PreGrantLead
	}
	heap.Init(&q)
	l.fireDue(&q)

	r, ok := sm.Run(jobs.RunID("allow", fireAt))
	if !ok || len(r.Attempts) != 1 || r.Attempts[0].State != jobs.Pending {
		t.Fatalf("allow at %s: run %+v, %v; want granted ahead, one pending attempt", fireAt, r, ok)
	}
	if _, ok := sm.Run(jobs.RunID("forbid", fireAt)); ok {
		t.Errorf("forbid was granted ahead beside its open run")
	}
	next := map[string]*fireEntry{}
	for _, e := range q {
		next[e.name] = e
	}
	if e := next["allow"]; !e.next.Equal(fireAt.Add(time.Second)) {
		t.Errorf("allow's next time %s, want %s", e.next, fireAt.Add(time.Second))
	}
	if e := next["forbid"]; !e.next.Equal(fireAt) || !e.wakeAt().Equal(fireAt) {
		t.Errorf("forbid: next %s, wakes at %s; want %s, granted at its fire time", e.next, e.wakeAt(), fireAt)
	}
	l.wg.Wait()
	d := l.s.Dispatcher.(*recordingDispatcher)
	d.mu.Lock()
	var sent []worker.Assignment
	sent = append(sent, d.sent...)
	d.mu.Unlock()
	found := false
	for _, a := range sent {
		if a.Run.ID == r.ID {
			found = true
			if !a.StartAt().Equal(fireAt) {
				t.Errorf("dispatched %s to start at %s, want %s", a.Run.ID, a.StartAt(), fireAt)
			}
			if want := allow.TokenExpiry(fireAt); !a.TokenExpires().Equal(want) {
				t.Errorf("token of %s expires %s, want %s (counted from the fire time)", a.Run.ID, a.TokenExpires(), want)
			}
		}
	}
	if !found {
		t.Errorf("the run granted ahead was not dispatched")
	}
	for _, e := range l.buildQueue() {
		if e.name == "allow" && !e.next.Equal(fireAt.Add(time.Second)) {
			t.Errorf("a new leader's queue: allow next at %s, want %s (after the time granted ahead)", e.next, fireAt.Add(time.Second))
		}
	}
}

// batchDispatcher records batch dispatches and single ones; failMany
// makes every batch fail.
type batchDispatcher struct {
	recordingDispatcher
	failMany bool
	batches  [][]worker.Assignment
}

func (d *batchDispatcher) DispatchMany(ctx context.Context, workerID string, as []worker.Assignment) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failMany {
		return errors.New("no route")
	}
	d.batches = append(d.batches, as)
	return nil
}

// The runs granted in one entry reach their worker in one call; a batch
// that fails is dispatched attempt by attempt.
func TestLeader_DispatchesABatchInOneCall(t *testing.T) {
	for _, failMany := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch fails %v", failMany), func(t *testing.T) {
			a, b, c := spec("a", jobs.MisfireLatest, jobs.OverlapAllow), spec("b", jobs.MisfireLatest, jobs.OverlapAllow), spec("c", jobs.MisfireLatest, jobs.OverlapAllow)
			l, _ := newTestLeader(t, a, b, c)
			d := &batchDispatcher{failMany: failMany}
			l.s.Dispatcher = d
			l.s.Clock = fixedClock{base.Add(time.Second + 10*time.Millisecond)}
			q := fireQueue{due(t, a, base), due(t, b, base), due(t, c, base)}
			heap.Init(&q)
			l.fireDue(&q)
			l.wg.Wait()
			d.mu.Lock()
			defer d.mu.Unlock()
			switch {
			case !failMany && (len(d.batches) != 1 || len(d.batches[0]) != 3 || len(d.sent) != 0):
				t.Errorf("%d batches (%v), %d single dispatches; want one batch of 3", len(d.batches), d.batches, len(d.sent))
			case failMany && len(d.sent) != 3:
				t.Errorf("%d single dispatches after a failed batch, want 3", len(d.sent))
			}
		})
	}
}

// A batch whose assignments are all being dispatched already (a change
// and a resync can name the same attempts) sends nothing; one with some
// new sends only those.
func TestLeader_DispatchAllSendsOnlyWhatIsNotInFlight(t *testing.T) {
	l, _ := newTestLeader(t)
	d := &batchDispatcher{}
	l.s.Dispatcher = d
	as := func(ids ...string) []worker.Assignment {
		var out []worker.Assignment
		for _, id := range ids {
			out = append(out, worker.Assignment{Attempt: jobs.Attempt{ID: id, Worker: "w2"}})
		}
		return out
	}
	l.mu.Lock()
	l.inflight["a.1"], l.inflight["b.1"] = true, true
	l.mu.Unlock()
	l.dispatchAll(as("a.1", "b.1"))
	l.wg.Wait()
	l.dispatchAll(as("a.1", "b.1", "c.1"))
	l.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	var sent [][]string
	for _, b := range d.batches {
		var ids []string
		for _, a := range b {
			ids = append(ids, a.Attempt.ID)
		}
		sent = append(sent, ids)
	}
	if fmt.Sprint(sent) != "[[c.1]]" {
		t.Errorf("batches sent: %v; want one, of c.1 alone", sent)
	}
}

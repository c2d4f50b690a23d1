package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
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
	l.s.Clock = fixedClock{fireAt.Add(-preGrantLead / 2)}
	q := fireQueue{due(t, allow, base), due(t, forbid, base)}
	for _, e := range q {
		e.lead = preGrantLead
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
	var sent []Assignment
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

// A worker given a run granted ahead confirms the lease at once and
// starts the process at the fire time, not before.
func TestWorker_GrantedAheadStartsAtTheFireTime(t *testing.T) {
	// Every renewal is confirmed.
	script := make([]*renewAnswer, 1000)
	for i := range script {
		script[i] = held
	}
	f := newLeaseFixture(t, script...)
	fireAt := leaseT0.Add(12 * time.Second)
	c, marker := runAhead(t, f, fireAt)
	if c.State != jobs.Succeeded || c.StartedAt.Before(fireAt) {
		t.Errorf("completion %+v: want succeeded, started at or after the fire time %s", c, fireAt)
	}
	if sends := f.leader.sends(); len(sends) == 0 || sends[0] != 0 {
		t.Errorf("renewals sent at %v: want the lease confirmed at once, not at the fire time", sends)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the process did not run: %v", err)
	}
}

// A run granted ahead whose lease is lost before its fire time (taken over
// by a newer attempt) never starts its process.
func TestWorker_GrantedAheadLostBeforeTheFireTimeNeverStarts(t *testing.T) {
	f := newLeaseFixture(t, held, notYours)
	fireAt := leaseT0.Add(25 * time.Second)
	c, marker := runAhead(t, f, fireAt)
	if c.State != jobs.Lost || !c.StartedAt.IsZero() || !strings.Contains(c.Error, "before the fire time") {
		t.Errorf("completion %+v: want lost before the fire time, never started", c)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the process ran (marker: %v)", err)
	}
}

// runAhead has f's worker run a scheduled attempt granted at leaseT0 for
// fireAt, whose process touches a marker file, and returns its completion
// and the marker's path. The clock stops at the fire time: the process
// runs in real time, and nothing after its start needs the clock to move.
func runAhead(t *testing.T, f *leaseFixture, fireAt time.Time) (fsm.Completion, string) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "ran")
	if err := f.w.Accept(tickAhead(marker, fireAt, leaseT0, testTTL)); err != nil {
		t.Fatal(err)
	}
	return f.completionBy(t, fireAt), marker
}

// tickAhead is a scheduled attempt for fireAt, granted at granted with a
// lease of ttl, whose process touches marker.
func tickAhead(marker string, fireAt, granted time.Time, ttl time.Duration) Assignment {
	return Assignment{
		Run:     jobs.Run{ID: "tick@x", Job: "tick", Trigger: "schedule", ScheduledAt: fireAt},
		Spec:    jobs.Spec{Name: "tick", Shell: `touch "$MARKER"`, Env: map[string]string{"MARKER": marker}, Timeout: jobs.Duration(time.Minute), LeaseTTL: jobs.Duration(ttl)},
		Attempt: jobs.Attempt{ID: "tick@x.1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 1, Seq: 1}, GrantedAt: granted},
	}
}

// batchDispatcher records batch dispatches and single ones; failMany
// makes every batch fail.
type batchDispatcher struct {
	recordingDispatcher
	failMany bool
	batches  [][]Assignment
}

func (d *batchDispatcher) DispatchMany(ctx context.Context, worker string, as []Assignment) error {
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

// A worker that shuts down while a run granted ahead waits for its fire
// time reports it lost without starting it, so a job with retries gets
// another attempt elsewhere.
func TestWorker_GrantedAheadShutdownBeforeTheFireTime(t *testing.T) {
	f := newLeaseFixture(t, held, held, held)
	marker := filepath.Join(t.TempDir(), "ran")
	a := tickAhead(marker, leaseT0.Add(20*time.Second), leaseT0, testTTL)
	if err := f.w.Accept(a); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.w.LeaseStates()[a.Attempt.ID] != LeaseHeld {
		if time.Now().After(deadline) {
			t.Fatalf("lease never held: %v", f.w.LeaseStates())
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.w.Close(context.Background()) }()
	var c fsm.Completion
	select {
	case c = <-f.leader.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no completion within 30s")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if c.State != jobs.Lost || !c.StartedAt.IsZero() || !c.NeverStarted || !strings.Contains(c.Error, "before the fire time") {
		t.Errorf("completion %+v: want lost before the fire time, never started", c)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the process ran (marker: %v)", err)
	}
}

package scheduler

import (
	"container/heap"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// A leader that finds several fire times of many jobs due at once records
// their skipped ranges in one entry, and grants the latest times in
// another.
func TestLeader_FireDueBatchesSkips(t *testing.T) {
	a, b, c := spec("a", jobs.MisfireLatest, jobs.OverlapAllow), spec("b", jobs.MisfireLatest, jobs.OverlapAllow), spec("c", jobs.MisfireLatest, jobs.OverlapAllow)
	l, fsm := newTestLeader(t, a, b, c)
	l.s.Clock = fixedClock{base.Add(3*time.Second + 100*time.Millisecond)}
	q := fireQueue{due(t, a, base), due(t, b, base), due(t, c, base)}
	heap.Init(&q)
	r := l.s.Raft.(*fakeRaft)
	r.mu.Lock()
	before := r.index
	r.mu.Unlock()
	l.fireDue(&q)
	r.mu.Lock()
	entries := r.index - before
	r.mu.Unlock()
	if entries != 2 {
		t.Errorf("%d entries, want 2: one for the skips, one for the grants", entries)
	}
	skips := fsm.Skips("")
	if len(skips) != 3 {
		t.Fatalf("skip ranges %+v, want one per job", skips)
	}
	for _, s := range skips {
		if s.Count != 2 || !s.From.Equal(base.Add(time.Second)) || !s.To.Equal(base.Add(2*time.Second)) {
			t.Errorf("skip range %+v, want the 2 fire times before the latest", s)
		}
	}
	for _, job := range []string{"a", "b", "c"} {
		if _, ok := fsm.Run(jobs.RunID(job, base.Add(3*time.Second))); !ok {
			t.Errorf("%s: the latest fire time was not granted", job)
		}
	}
}

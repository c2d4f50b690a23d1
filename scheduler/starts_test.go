package scheduler

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Start reports that reach the leader together are committed in one
// entry, each answered on its own.
func TestLeader_StartsCommitInGroups(t *testing.T) {
	const n = 20
	var specs []jobs.Spec
	for i := range n {
		specs = append(specs, spec(fmt.Sprintf("j%02d", i), jobs.MisfireLatest, jobs.OverlapAllow))
	}
	l, fsm := newTestLeader(t, specs...)
	var attempts []string
	for i := range n {
		res, err := l.s.applyLocalCmd(l.ctx, grant(fmt.Sprintf("j%02d", i), base))
		if err != nil {
			t.Fatal(err)
		}
		a, _ := res.Run.Latest()
		attempts = append(attempts, a.ID)
	}
	l.s.term.Store(l)
	r := l.s.Raft.(*fakeRaft)
	r.mu.Lock()
	before := r.index
	r.mu.Unlock()

	errs := make(chan error, n+1)
	for _, id := range append(attempts, "nope@20260701T090005Z.1") {
		go func() { errs <- l.s.Local().Started(l.ctx, id, base.Add(time.Second)) }()
	}
	// The committer starts once every report waits for it.
	deadline := time.Now().Add(30 * time.Second)
	for len(l.starts.ch) < n+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d start reports queued after 30s, want %d", len(l.starts.ch), n+1)
		}
		time.Sleep(time.Millisecond)
	}
	l.wg.Go(func() { l.starts.run(l.ctx) })
	notFound := 0
	for range n + 1 {
		select {
		case err := <-errs:
			switch {
			case errors.Is(err, jobs.ErrNotFound):
				notFound++
			case err != nil:
				t.Error(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a start report was not answered in 30s")
		}
	}
	if notFound != 1 {
		t.Errorf("%d reports refused as not found, want 1 (the unknown attempt)", notFound)
	}
	r.mu.Lock()
	entries := r.index - before
	r.mu.Unlock()
	if entries != 1 {
		t.Errorf("%d start reports made %d entries, want 1", n+1, entries)
	}
	for _, id := range attempts {
		runID, _, _ := jobs.SplitAttemptID(id)
		if run, _ := fsm.Run(runID); run.State != jobs.Running {
			t.Errorf("%s: %s, want running", runID, run.State)
		}
	}
}

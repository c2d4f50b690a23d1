package fsm

import (
	"errors"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestDecideAhead(t *testing.T) {
	open := []jobs.Run{{ID: "a@1"}}
	for _, tc := range []struct {
		name string
		in   GrantInput
		ok   bool
	}{
		{"no open run, forbid", GrantInput{Job: "a", Overlap: jobs.OverlapForbid}, true},
		{"open run, allow", GrantInput{Job: "a", Overlap: jobs.OverlapAllow, Open: open}, true},
		{"open run, forbid", GrantInput{Job: "a", Overlap: jobs.OverlapForbid, Open: open}, false},
		{"open run, replace", GrantInput{Job: "a", Overlap: jobs.OverlapReplace, Open: open}, false},
		{"open run, forced", GrantInput{Job: "a", Overlap: jobs.OverlapForbid, Open: open, Force: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := DecideAhead(tc.in)
			if got := err == nil; got != tc.ok {
				t.Errorf("DecideAhead = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrNotAhead) {
				t.Errorf("error %v does not wrap ErrNotAhead", err)
			}
		})
	}
}

// A grant ahead of the fire time is refused, changing nothing, while the
// job has an open run under forbid: at the fire time that run may have
// ended. Once it has, the grant ahead is granted, with a token of its
// entry; a second grant of the same time (a new leader's) is a duplicate.
func TestFSM_GrantAhead(t *testing.T) {
	f := withJobs(t, "report") // overlap defaults to forbid
	t0 := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	if res := applyAt(t, f, 2, 2, grant("report", t0)); res.Err != nil {
		t.Fatal(res.Err)
	}
	ahead := func(at time.Time) replicated.Command {
		c := grant("report", at)
		c.Grant.Ahead = true
		return c
	}
	next := t0.Add(5 * time.Second)
	res := applyAt(t, f, 2, 3, ahead(next))
	if !errors.Is(res.Err, ErrNotAhead) {
		t.Fatalf("grant ahead beside an open run: %v, want ErrNotAhead", res.Err)
	}
	if _, ok := f.Run(jobs.RunID("report", next)); ok {
		t.Errorf("a refused grant ahead recorded its run")
	}
	if got, _ := f.LastScheduled("report"); !got.Equal(t0) {
		t.Errorf("last scheduled %s after a refused grant ahead, want %s", got, t0)
	}
	if res := applyAt(t, f, 2, 4, replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: jobs.AttemptID(jobs.RunID("report", t0), 1), Node: "w1", State: jobs.Succeeded, EndedAt: t0}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	res = applyAt(t, f, 2, 5, ahead(next))
	if res.Err != nil {
		t.Fatalf("grant ahead with no open run: %v", res.Err)
	}
	if a, ok := res.Run.Latest(); !ok || a.Token != (jobs.Fence{Epoch: 2, Seq: 5}) || a.State != jobs.Pending {
		t.Errorf("granted ahead: attempt %+v, want pending with token 2/5", a)
	}
	if res := applyAt(t, f, 3, 6, grant("report", next)); !errors.Is(res.Err, jobs.ErrDuplicateRun) {
		t.Errorf("a new leader's grant of a time granted ahead: %v, want ErrDuplicateRun", res.Err)
	}
}

package fsm

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestDecideAdmission(t *testing.T) {
	g := jobs.Group{Name: "db", MaxRunning: 2, MaxWaiting: 1}
	for _, tc := range []struct {
		load GroupLoad
		want Admission
	}{
		{GroupLoad{0, 0}, Admit},
		{GroupLoad{1, 0}, Admit},
		{GroupLoad{2, 0}, Wait},
		{GroupLoad{1, 0}, Admit},
		{GroupLoad{0, 1}, Full}, // a place is free, but a waiter goes first and the queue is full
		{GroupLoad{2, 1}, Full},
	} {
		if got := DecideAdmission(g, tc.load); got != tc.want {
			t.Errorf("DecideAdmission(%+v) = %v, want %v", tc.load, got, tc.want)
		}
	}
	if got := DecideAdmission(jobs.Group{Name: "db", MaxRunning: 1}, GroupLoad{1, 0}); got != Full {
		t.Errorf("max_waiting 0, full: %v, want Full", got)
	}
	for _, tc := range []struct {
		load GroupLoad
		want int
	}{{GroupLoad{0, 5}, 2}, {GroupLoad{1, 5}, 1}, {GroupLoad{2, 5}, 0}, {GroupLoad{0, 1}, 1}, {GroupLoad{3, 1}, 0}} {
		if got := PromoteWaiters(g, tc.load); got != tc.want {
			t.Errorf("PromoteWaiters(%+v) = %d, want %d", tc.load, got, tc.want)
		}
	}
}

func groupSpecs(maxRunning, maxWaiting int, names ...string) []jobs.Spec {
	g := &jobs.Group{Name: "db", MaxRunning: maxRunning, MaxWaiting: maxWaiting}
	var out []jobs.Spec
	for _, n := range names {
		out = append(out, jobs.Spec{Name: n, Schedules: []string{"@every 5s"}, Shell: "true", Group: "db", GroupLimits: g})
	}
	return out
}

func completeOK(attempt string, at time.Time) replicated.Command {
	code := 0
	return replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: attempt, State: jobs.Succeeded, ExitCode: &code, EndedAt: at}}
}

// A group with max_running 1: the first grant runs, the next wait in
// fire-time order, the one beyond max_waiting is skipped; the entry that
// ends the running attempt admits the oldest waiter, whose first attempt
// the admit entry grants with its own token; a snapshot carries the queue.
func TestFSM_Groups(t *testing.T) {
	f := withSpecs(t, groupSpecs(1, 2, "a", "b", "c", "d")...)
	res := applyAt(t, f, 2, 10, grant("a", t0))
	if len(res.Run.Attempts) != 1 || res.Run.Group != "db" {
		t.Fatalf("first grant: %+v", res.Run)
	}
	runA := res.Run
	// b fires later than c, but its grant is applied first.
	b := applyAt(t, f, 2, 11, grant("b", t0.Add(2*time.Second))).Run
	c := applyAt(t, f, 2, 12, grant("c", t0.Add(time.Second))).Run
	for _, r := range []jobs.Run{b, c} {
		if !jobs.IsWaiting(r) || r.Reason != "waiting for group db" || len(r.Attempts) != 0 {
			t.Errorf("run %s: %s %q with %d attempts; want waiting", r.ID, r.State, r.Reason, len(r.Attempts))
		}
	}
	d := applyAt(t, f, 2, 13, grant("d", t0.Add(3*time.Second))).Run
	if d.State != jobs.Skipped || !strings.HasPrefix(d.Reason, "waiting for group db: its queue is full") {
		t.Errorf("run beyond max_waiting: %s %q; want skipped, queue full", d.State, d.Reason)
	}
	st := f.Groups()
	if len(st) != 1 || len(st[0].Holding) != 1 || len(st[0].Waiting) != 2 || st[0].Waiting[0].Run != c.ID {
		t.Fatalf("groups = %+v; want a holding, c then b waiting", st)
	}

	// Leader change: a new FSM from a snapshot knows the queue.
	f = snapshotRestored(t, f)
	feed := f.Changes()
	defer feed.Close()
	a1, _ := runA.Latest()
	applyAt(t, f, 3, 20, completeOK(a1.ID, t0.Add(5*time.Second)))
	got, _ := f.Run(c.ID)
	if !IsAdmitted(got) || !strings.HasPrefix(got.Reason, "admitted to group db after waiting") {
		t.Fatalf("oldest waiter after a's completion: %s %q; want admitted", got.State, got.Reason)
	}
	if got, _ := f.Run(b.ID); !jobs.IsWaiting(got) {
		t.Errorf("b: %s %q; want still waiting", got.State, got.Reason)
	}
	admitted := false
	for _, ch := range feed.Take() {
		admitted = admitted || (ch.Kind == ChangeAdmitted && ch.Run == c.ID && ch.Index == 20)
	}
	if !admitted {
		t.Error("no ChangeAdmitted for c from the completing entry")
	}
	res = applyAt(t, f, 3, 21, replicated.Command{Op: replicated.OpAdmit, Admit: &replicated.AdmitCmd{Run: c.ID, Worker: "w2", At: t0.Add(5 * time.Second)}})
	ca, ok := res.Run.Latest()
	if res.Err != nil || !ok || ca.Token != (jobs.Fence{Epoch: 3, Seq: 21}) || ca.Worker != "w2" {
		t.Fatalf("admit: %v, attempt %+v; want token 3.21 to w2", res.Err, ca)
	}
	// Admitted twice (a retried proposal, a second leader): refused.
	if res := applyAt(t, f, 3, 22, replicated.Command{Op: replicated.OpAdmit, Admit: &replicated.AdmitCmd{Run: c.ID, Worker: "w1", At: t0}}); !errors.Is(res.Err, jobs.ErrStaleAttempt) {
		t.Errorf("second admit: %v; want ErrStaleAttempt", res.Err)
	}
	if res := applyAt(t, f, 3, 23, replicated.Command{Op: replicated.OpAdmit, Admit: &replicated.AdmitCmd{Run: b.ID, Worker: "w1", At: t0}}); !errors.Is(res.Err, jobs.ErrStaleAttempt) {
		t.Errorf("admit of a waiter: %v; want ErrStaleAttempt", res.Err)
	}
	// Released with no retries left: the run ends, and b is admitted.
	applyAt(t, f, 3, 24, release(ca.ID, "stuck", "test"))
	if got, _ := f.Run(b.ID); !IsAdmitted(got) {
		t.Errorf("b after c's release: %s %q; want admitted", got.State, got.Reason)
	}
	if st := f.Groups(); len(st[0].Waiting) != 0 || len(st[0].Holding) != 1 {
		t.Errorf("groups = %+v; want b holding, nobody waiting", st)
	}
}

// A batch grant admits as single grants do; overlap: replace cancels a
// waiting run; an entry of version 3 knows no groups.
func TestFSM_GroupsInBatchesAndReplace(t *testing.T) {
	t.Run("batch", func(t *testing.T) {
		f := withSpecs(t, groupSpecs(1, 5, "a", "b")...)
		res := applyAt(t, f, 2, 10, grants(
			&replicated.GrantCmd{Job: "a", ScheduledAt: t0, Worker: "w1", Trigger: "schedule", At: t0},
			&replicated.GrantCmd{Job: "b", ScheduledAt: t0, Worker: "w2", Trigger: "schedule", At: t0}))
		if res.Batch[0].Err != nil || len(res.Batch[0].Run.Attempts) != 1 {
			t.Errorf("a: %+v", res.Batch[0])
		}
		if !jobs.IsWaiting(res.Batch[1].Run) {
			t.Errorf("b: %s %q; want waiting", res.Batch[1].Run.State, res.Batch[1].Run.Reason)
		}
	})
	t.Run("replace cancels a waiter", func(t *testing.T) {
		specs := groupSpecs(1, 5, "a", "b")
		specs[1].Overlap = jobs.OverlapReplace
		f := withSpecs(t, specs...)
		applyAt(t, f, 2, 10, grant("a", t0))
		first := applyAt(t, f, 2, 11, grant("b", t0)).Run
		second := applyAt(t, f, 2, 12, grant("b", t0.Add(time.Second))).Run
		if got, _ := f.Run(first.ID); got.State != jobs.Cancelled {
			t.Errorf("replaced waiter: %s; want cancelled", got.State)
		}
		if st := f.Groups(); len(st[0].Waiting) != 1 || st[0].Waiting[0].Run != second.ID {
			t.Errorf("queue = %+v; want only the newer run", st[0].Waiting)
		}
	})
	t.Run("version 3", func(t *testing.T) {
		f := withSpecs(t, groupSpecs(1, 5, "a", "b")...)
		applyAt(t, f, 2, 10, grant("a", t0))
		c := grant("b", t0)
		c.V = 3
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if res := applyRaw(t, f, 2, 11, b); len(res.Run.Attempts) != 1 {
			t.Errorf("a version 3 grant waited: %+v", res.Run)
		}
	})
}

// An admitted run whose job left the set ends at its admit entry, and
// its place goes to the next waiter in the same entry.
func TestFSM_AdmitAfterTheJobLeft(t *testing.T) {
	specs := groupSpecs(1, 5, "a", "b", "c")
	f := withSpecs(t, specs...)
	a := applyAt(t, f, 2, 10, grant("a", t0)).Run
	b := applyAt(t, f, 2, 11, grant("b", t0.Add(time.Second))).Run
	c := applyAt(t, f, 2, 12, grant("c", t0.Add(2*time.Second))).Run
	at, _ := a.Latest()
	applyAt(t, f, 2, 13, completeOK(at.ID, t0.Add(3*time.Second)))
	applyAt(t, f, 2, 14, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{specs[0], specs[2]}, Source: "test", At: t0.Add(4 * time.Second)}})
	res := applyAt(t, f, 2, 15, replicated.Command{Op: replicated.OpAdmit, Admit: &replicated.AdmitCmd{Run: b.ID, At: t0.Add(5 * time.Second)}})
	if res.Err != nil || res.Run.State != jobs.Cancelled || len(res.Run.Attempts) != 0 {
		t.Fatalf("admit of a removed job's run: %v, %s with %d attempts; want cancelled, none", res.Err, res.Run.State, len(res.Run.Attempts))
	}
	if got, _ := f.Run(c.ID); !IsAdmitted(got) {
		t.Errorf("c: %s %q; want admitted in b's place", got.State, got.Reason)
	}
}

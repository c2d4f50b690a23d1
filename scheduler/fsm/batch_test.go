package fsm

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func grants(gs ...*replicated.GrantCmd) replicated.Command {
	c := &replicated.GrantsCmd{}
	for _, g := range gs {
		c.Grants = append(c.Grants, *g)
	}
	return replicated.Command{Op: replicated.OpGrants, Grants: c}
}

// A batch grants each run as a grant of its own would, every attempt
// with the entry's token; what DecideGrant refuses (a duplicate) and
// what batchgrant.Decide refuses (the same job twice) change nothing.
func TestFSM_BatchGrant(t *testing.T) {
	f := withJobs(t, "a", "b", "c")
	if res := applyAt(t, f, 2, 10, grant("c", t0)); res.Err != nil {
		t.Fatal(res.Err)
	}
	res := applyAt(t, f, 3, 11, grants(grant("a", t0).Grant, grant("b", t0).Grant, grant("c", t0).Grant, grant("a", t0.Add(5*time.Second)).Grant))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got, want := len(res.Batch), 4; got != want {
		t.Fatalf("results = %d, want %d", got, want)
	}
	for i, job := range []string{"a", "b"} {
		r := res.Batch[i]
		if r.Err != nil {
			t.Fatalf("%s: %v", job, r.Err)
		}
		a, _ := r.Run.Latest()
		if got, want := a.Token, (jobs.Fence{Epoch: 3, Seq: 11}); got != want {
			t.Errorf("%s: token = %s, want %s", job, got, want)
		}
		if run, ok := f.Run(jobs.RunID(job, t0)); !ok || run.State != jobs.Pending {
			t.Errorf("%s: run = %+v, %v; want pending", job, run, ok)
		}
	}
	if !errors.Is(res.Batch[2].Err, jobs.ErrDuplicateRun) {
		t.Errorf("c again: err = %v, want ErrDuplicateRun", res.Batch[2].Err)
	}
	if run, _ := f.Run(jobs.RunID("c", t0)); len(run.Attempts) != 1 || run.Attempts[0].Token.Seq != 10 {
		t.Errorf("c after the batch = %+v, want its first grant only", run)
	}
	if !errors.Is(res.Batch[3].Err, ErrBatchOverlap) {
		t.Errorf("a twice: err = %v, want ErrBatchOverlap", res.Batch[3].Err)
	}
	if _, ok := f.Run(jobs.RunID("a", t0.Add(5*time.Second))); ok {
		t.Error("the refused member was recorded")
	}
	// Proposed on its own, it is decided as any grant (here skipped:
	// overlap forbid, and a's first run is open).
	if r := applyAt(t, f, 3, 12, grant("a", t0.Add(5*time.Second))); r.Err != nil || r.Run.ID != jobs.RunID("a", t0.Add(5*time.Second)) {
		t.Errorf("a alone: %+v, %v", r.Run, r.Err)
	}
}

// A batch grant is of log version 3: in an entry that claims an older
// version it is an op the FSM does not know, and halts it.
func TestFSM_BatchGrantNeedsVersion3(t *testing.T) {
	f := withJobs(t, "a", "b")
	c := grants(grant("a", t0).Grant, grant("b", t0).Grant)
	c.V = 2
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if res := applyRaw(t, f, 2, 10, b); !errors.Is(res.Err, ErrLogHalted) {
		t.Fatalf("err = %v, want ErrLogHalted", res.Err)
	}
	if _, ok := f.Run(jobs.RunID("a", t0)); ok {
		t.Error("a halted entry granted a run")
	}
}

// A completion records when the worker received the dispatch.
func TestFSM_CompleteRecordsAcceptedAt(t *testing.T) {
	f := withJobs(t, "a")
	g := applyAt(t, f, 2, 10, grant("a", t0))
	att, _ := g.Run.Latest()
	accepted := t0.Add(3 * time.Millisecond)
	res := applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: att.ID, State: jobs.Succeeded, AcceptedAt: accepted, StartedAt: t0.Add(5 * time.Millisecond), EndedAt: t0.Add(9 * time.Millisecond)}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got, _ := res.Run.Latest(); !got.AcceptedAt.Equal(accepted) {
		t.Errorf("accepted_at = %v, want %v", got.AcceptedAt, accepted)
	}
}

// checkGroupOfFour checks the results of a group entry of four items of
// which the second names no attempt: it fails alone, with ErrNotFound.
func checkGroupOfFour(t *testing.T, res ApplyResult) {
	t.Helper()
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got, want := len(res.Batch), 4; got != want {
		t.Fatalf("results = %d, want %d", got, want)
	}
	if res.Batch[0].Err != nil || res.Batch[2].Err != nil || res.Batch[3].Err != nil {
		t.Errorf("results: %v, %v, %v; want no errors", res.Batch[0].Err, res.Batch[2].Err, res.Batch[3].Err)
	}
	if !errors.Is(res.Batch[1].Err, jobs.ErrNotFound) {
		t.Errorf("unknown attempt: err = %v, want ErrNotFound", res.Batch[1].Err)
	}
}

// A group of completions applies each as a completion of its own would:
// one that names no attempt fails alone, a repeated one changes nothing.
func TestFSM_CompletesGroup(t *testing.T) {
	f := withJobs(t, "a", "b")
	ga := applyAt(t, f, 2, 10, grant("a", t0))
	gb := applyAt(t, f, 2, 11, grant("b", t0))
	aa, _ := ga.Run.Latest()
	ab, _ := gb.Run.Latest()
	done := func(id string, st jobs.State) replicated.Completion {
		return replicated.Completion{Attempt: id, State: st, StartedAt: t0.Add(time.Millisecond), EndedAt: t0.Add(2 * time.Millisecond)}
	}
	group := &replicated.CompletesCmd{Completions: []replicated.Completion{
		done(aa.ID, jobs.Succeeded), done("nope@20260701T090005Z.1", jobs.Succeeded), done(ab.ID, jobs.Failed), done(aa.ID, jobs.Failed),
	}}
	res := applyAt(t, f, 2, 12, replicated.Command{Op: replicated.OpCompletes, Completes: group})
	checkGroupOfFour(t, res)
	for id, want := range map[string]jobs.State{ga.Run.ID: jobs.Succeeded, gb.Run.ID: jobs.Failed} {
		if r, _ := f.Run(id); r.State != want || !r.Attempts[0].StartedAt.Equal(t0.Add(time.Millisecond)) {
			t.Errorf("%s: state %s, started %v; want %s, started from the completion", id, r.State, r.Attempts[0].StartedAt, want)
		}
	}
}

package fsm

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// The record keeps the tail from a version 4 entry on, in the snapshot
// and out of the job's summary; a version 3 entry (an older leader's)
// never carried one, and applies as it did.
func TestFSM_CompletionKeepsStdoutTail(t *testing.T) {
	f := withJobs(t, "report", "old")
	g := applyAt(t, f, 2, 10, grant("report", t0))
	id := g.Run.Attempts[0].ID
	zero := 0
	done := replicated.Completion{Attempt: id, State: jobs.Succeeded, ExitCode: &zero, StdoutTail: "<b>total</b> 42\n", EndedAt: t0.Add(time.Second)}
	if res := applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpComplete, Complete: &done}); res.Err != nil || res.Run.Attempts[0].StdoutTail != done.StdoutTail {
		t.Fatalf("complete: %v, attempt %+v", res.Err, res.Run.Attempts)
	}
	if r, _ := snapshotRestored(t, f).Run(g.Run.ID); r.Attempts[0].StdoutTail != done.StdoutTail {
		t.Errorf("restored from a snapshot: tail %q", r.Attempts[0].StdoutTail)
	}

	g3 := applyAt(t, f, 2, 12, grant("old", t0))
	c3 := replicated.Command{Op: replicated.OpComplete, V: 3, Complete: &replicated.Completion{Attempt: g3.Run.Attempts[0].ID, State: jobs.Succeeded, ExitCode: &zero, StdoutTail: "x", EndedAt: t0}}
	b, err := json.Marshal(c3)
	if err != nil {
		t.Fatal(err)
	}
	if res := applyRaw(t, f, 2, 13, b); res.Err != nil || res.Run.Attempts[0].StdoutTail != "" {
		t.Errorf("a version 3 completion: %v, tail %q; want none", res.Err, res.Run.Attempts[0].StdoutTail)
	}
	r, _ := f.Run(g.Run.ID)
	if s := replicated.SummaryOf(&r); s.Attempt == nil || s.Attempt.StdoutTail != "" {
		t.Errorf("the summary keeps the tail: %+v", s.Attempt)
	}
}

// An HTTP job's completion records the response's status and size from a
// version 8 entry on, in the snapshot too; a version 7 entry (an older
// leader's) applies as it did, without them.
func TestFSM_CompletionKeepsHTTPStatus(t *testing.T) {
	f := withJobs(t, "ping", "old")
	g := applyAt(t, f, 2, 10, grant("ping", t0))
	done := replicated.Completion{Attempt: g.Run.Attempts[0].ID, State: jobs.Succeeded, HTTPStatus: 204, ResponseBytes: 17, StartedAt: t0, EndedAt: t0.Add(40 * time.Millisecond)}
	res := applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpComplete, Complete: &done})
	if a := res.Run.Attempts[0]; res.Err != nil || a.HTTPStatus != 204 || a.ResponseBytes != 17 || a.Duration() != 40*time.Millisecond || a.ExitCode != nil {
		t.Fatalf("complete: %v, attempt %+v", res.Err, res.Run.Attempts)
	}
	if r, _ := snapshotRestored(t, f).Run(g.Run.ID); r.Attempts[0].HTTPStatus != 204 || r.Attempts[0].ResponseBytes != 17 {
		t.Errorf("restored from a snapshot: %+v", r.Attempts[0])
	}
	g7 := applyAt(t, f, 2, 12, grant("old", t0))
	c7 := replicated.Command{Op: replicated.OpComplete, V: 7, Complete: &replicated.Completion{Attempt: g7.Run.Attempts[0].ID, State: jobs.Succeeded, HTTPStatus: 200, ResponseBytes: 3, EndedAt: t0}}
	b, err := json.Marshal(c7)
	if err != nil {
		t.Fatal(err)
	}
	if res := applyRaw(t, f, 2, 13, b); res.Err != nil || res.Run.Attempts[0].HTTPStatus != 0 || res.Run.Attempts[0].ResponseBytes != 0 {
		t.Errorf("a version 7 completion: %v, attempt %+v; want no HTTP status", res.Err, res.Run.Attempts[0])
	}
}

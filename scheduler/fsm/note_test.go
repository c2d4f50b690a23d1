package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func note(attempt, kind, detail string) replicated.Command {
	return replicated.Command{Op: replicated.OpNote, Note: &replicated.NoteCmd{Attempt: attempt, Kind: kind, Node: "store", Detail: detail, At: t0}}
}

// A store_refused note is the ledger of a refusal the store made of an
// attempt's write: it counts in stale_refused (once, whoever reports it
// first), it is kept on the attempt, and an attempt that ends failed
// because of it ends fenced.
func TestFSM_StoreRefusedNote(t *testing.T) {
	out := func(f *FSM, idx uint64, at time.Time) jobs.Run {
		t.Helper()
		g := grant("report", at)
		g.Grant.Output = "reports/x.csv"
		res := applyAt(t, f, 2, idx, g)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res.Run
	}
	complete := func(f *FSM, idx uint64, c replicated.Completion) jobs.Run {
		t.Helper()
		res := applyAt(t, f, 2, idx, replicated.Command{Op: replicated.OpComplete, Complete: &c})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res.Run
	}
	three := 3

	t.Run("the job's own publish refused, then it exits 3", func(t *testing.T) {
		f := withSpecs(t, jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "fencecron publish", Retries: 2})
		run := out(f, 10, t0)
		id := run.Attempts[0].ID
		detail := "stale_owner reports/other.csv greatest=2.18"
		if res := applyAt(t, f, 2, 11, note(id, jobs.NoteStoreRefused, detail)); res.Err != nil {
			t.Fatal(res.Err)
		}
		// The same note again (a retried RPC) is not counted twice.
		applyAt(t, f, 2, 12, note(id, jobs.NoteStoreRefused, detail))
		run = complete(f, 13, replicated.Completion{Attempt: id, State: jobs.Failed, ExitCode: &three, Error: "exit code 3", EndedAt: t0})
		a := run.Attempts[0]
		if a.State != jobs.Fenced || a.StoreOutcome != "stale_owner" || !strings.Contains(a.Error, "exit code 3") || !strings.Contains(a.Error, detail) {
			t.Errorf("attempt %s, store %q, error %q; want fenced, stale_owner, saying both", a.State, a.StoreOutcome, a.Error)
		}
		if run.State != jobs.Fenced || AwaitsRetry(run) {
			t.Errorf("run %s (awaits retry %v), want fenced with no retry", run.State, AwaitsRetry(run))
		}
		if len(a.StoreRefusals) != 1 || a.StoreRefusals[0] != detail {
			t.Errorf("refusals kept = %v", a.StoreRefusals)
		}
		c := f.Counters()
		if c[CounterStaleRefused] != 1 || c[CounterStoreRefused+"stale_owner"] != 1 || c[CounterFenced] != 1 {
			t.Errorf("counters = %v, want stale_refused 1, store_refused_stale_owner 1, fenced 1", c)
		}
	})
	t.Run("the completion came first", func(t *testing.T) {
		f := withSpecs(t, jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "fencecron publish", Retries: 2})
		run := out(f, 10, t0)
		id := run.Attempts[0].ID
		if run = complete(f, 11, replicated.Completion{Attempt: id, State: jobs.Failed, ExitCode: &three, EndedAt: t0}); !AwaitsRetry(run) {
			t.Fatalf("failed with retries left: %s, want awaiting a retry", run.State)
		}
		feed := f.Changes()
		defer feed.Close()
		res := applyAt(t, f, 2, 12, note(id, jobs.NoteStoreRefused, "expired reports/x.csv greatest=2.10"))
		if res.Err != nil || res.Run.State != jobs.Fenced || res.Run.Attempts[0].StoreOutcome != "expired" {
			t.Errorf("note after the failure: %v, run %s, store %q; want fenced (expired)", res.Err, res.Run.State, res.Run.Attempts[0].StoreOutcome)
		}
		if got := feed.Take(); len(got) != 1 || got[0].Kind != ChangeEnded {
			t.Errorf("changes = %+v, want the run's end (no retry)", got)
		}
		if c := f.Counters(); c[CounterStaleRefused] != 1 || c[CounterStoreRefused+"expired"] != 1 {
			t.Errorf("counters = %v", c)
		}
	})
	t.Run("the worker's own publish refused is counted once", func(t *testing.T) {
		f := withSpecs(t, jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true"})
		run := out(f, 10, t0)
		id := run.Attempts[0].ID
		applyAt(t, f, 2, 11, note(id, jobs.NoteStoreRefused, "stale_owner reports/x.csv greatest=2.18"))
		complete(f, 12, replicated.Completion{Attempt: id, State: jobs.Fenced, StoreOutcome: "stale_owner", EndedAt: t0})
		// And in the other order, for another run.
		run = out(f, 13, t0.Add(5*time.Second))
		id = run.Attempts[0].ID
		complete(f, 14, replicated.Completion{Attempt: id, State: jobs.Fenced, StoreOutcome: "stale_owner", EndedAt: t0})
		applyAt(t, f, 2, 15, note(id, jobs.NoteStoreRefused, "stale_owner reports/x.csv greatest=2.18"))
		if c := f.Counters(); c[CounterStaleRefused] != 2 || c[CounterFenced] != 2 {
			t.Errorf("counters = %v, want stale_refused 2 (one per refusal), fenced 2", c)
		}
	})
	t.Run("kinds and details are checked; counters have fixed names", func(t *testing.T) {
		f := withSpecs(t, jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true"})
		id := out(f, 10, t0).Attempts[0].ID
		for _, n := range []replicated.Command{
			note(id, "grants", "x"),
			note(id, "", "x"),
			note(id, jobs.NoteStoreRefused, "applied reports/x.csv greatest=2.1"),
			note(id, jobs.NoteStoreRefused, "stale_owner"),
			note(id, jobs.NoteStoreRefused, "stale_owner "+strings.Repeat("k", replicated.MaxRefusalDetail)+" greatest=1.1"),
		} {
			if res := applyAt(t, f, 2, 11, n); !errors.Is(res.Err, jobs.ErrInvalidConfig) {
				t.Errorf("note %s %q: %v, want ErrInvalidConfig", n.Note.Kind, n.Note.Detail, res.Err)
			}
		}
		applyAt(t, f, 2, 12, note(id, jobs.EventSuspect, "renewal late"))
		// A long detail is cut, not refused: a worker's LOST is not lost
		// for a long error text.
		if res := applyAt(t, f, 2, 12, note(id, jobs.EventLost, strings.Repeat("x", 4*MaxAuditDetail))); res.Err != nil {
			t.Errorf("a long lost note: %v", res.Err)
		}
		if e := f.Events(0, 1)[0]; e.Kind != jobs.EventLost || len(e.Detail) > MaxAuditDetail+3 {
			t.Errorf("long note recorded as %s of %d bytes", e.Kind, len(e.Detail))
		}
		if c := f.Counters(); c["grants"] != 1 || c[CounterSuspect] != 1 || c[CounterLost] != 1 || c[CounterElections] != 1 || len(c) != 4 {
			t.Errorf("counters = %v, want only grants, suspect, lost and the term's election, 1 each", c)
		}
		// A version 1 note counted any kind under its own name; its
		// entries still do.
		applyV1(t, f, 2, 13, note(id, "anything", "x"))
		if c := f.Counters(); c["anything"] != 1 {
			t.Errorf("version 1 note: counters = %v", c)
		}
	})
}

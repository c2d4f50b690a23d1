package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

var t0 = time.Date(2026, 7, 1, 9, 0, 5, 0, time.UTC)

// applyAt feeds one command to the FSM as the log entry (term, index), of
// this binary's log version. As a real leader loop does, it first commits
// the term's election entry (at the same index, by "test-leader") when c
// mints a token in a term that has none yet (termstart.go); tests of that
// rule itself use applyRaw.
func applyAt(t *testing.T, f *FSM, term, index uint64, c replicated.Command) ApplyResult {
	t.Helper()
	if e, _ := f.Epoch(); opsByName[c.Op].mintsToken(&c) && e != term+f.st.EpochBase {
		b, err := EncodeEntry(replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "test-leader", At: t0}})
		if err != nil {
			t.Fatal(err)
		}
		if res := applyRaw(t, f, term, index, b); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	b, err := EncodeEntry(c)
	if err != nil {
		t.Fatal(err)
	}
	return applyRaw(t, f, term, index, b)
}

// applyV1 feeds one command as an entry written before log versions.
func applyV1(t *testing.T, f *FSM, term, index uint64, c replicated.Command) ApplyResult {
	t.Helper()
	c.V = 0
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return applyRaw(t, f, term, index, b)
}

func applyRaw(t *testing.T, f *FSM, term, index uint64, b []byte) ApplyResult {
	t.Helper()
	res, ok := f.Apply(&raft.Log{Term: term, Index: index, Type: raft.LogCommand, Data: b}).(ApplyResult)
	if !ok {
		t.Fatalf("Apply returned %T", res)
	}
	return res
}

func withJobs(t *testing.T, names ...string) *FSM {
	t.Helper()
	f := NewFSM()
	var specs []jobs.Spec
	for _, n := range names {
		specs = append(specs, jobs.Spec{Name: n, Schedules: []string{"@every 5s"}, Shell: "true"})
	}
	if res := applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "test"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	return f
}

func grant(job string, at time.Time) replicated.Command {
	return replicated.Command{Op: replicated.OpGrant, Grant: &replicated.GrantCmd{Job: job, ScheduledAt: at, Worker: "w1", Trigger: "schedule", At: at}}
}

func TestFSM_GrantMintsTokenFromTermAndIndex(t *testing.T) {
	f := withJobs(t, "report")
	res := applyAt(t, f, 7, 42, grant("report", t0))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	a, ok := res.Run.Latest()
	if !ok {
		t.Fatal("granted run has no attempt")
	}
	if got, want := a.Token, (jobs.Fence{Epoch: 7, Seq: 42}); got != want {
		t.Errorf("token = %+v, want %+v", got, want)
	}
	if got, want := a.ID, "report@20260701T090005Z.1"; got != want {
		t.Errorf("attempt id = %q, want %q", got, want)
	}
	if res.Run.State != jobs.Pending || a.State != jobs.Pending {
		t.Errorf("states = %s/%s, want pending", res.Run.State, a.State)
	}
}

func TestFSM_RefusesSecondGrantForSameJobAndTime(t *testing.T) {
	f := withJobs(t, "report", "other")
	first := applyAt(t, f, 2, 10, grant("report", t0))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	// Whichever leader proposes it, and however later, the same (job,
	// scheduled time) is refused and the original grant is untouched.
	second := applyAt(t, f, 3, 20, grant("report", t0))
	if !errors.Is(second.Err, jobs.ErrDuplicateRun) {
		t.Fatalf("second grant: err = %v, want ErrDuplicateRun", second.Err)
	}
	run, ok := f.Run(first.Run.ID)
	if !ok || len(run.Attempts) != 1 || run.Attempts[0].Token != (jobs.Fence{Epoch: 2, Seq: 10}) {
		t.Errorf("run after duplicate = %+v, want the first grant only", run)
	}
	// Another job, or another time, is a different run.
	if res := applyAt(t, f, 3, 21, grant("other", t0)); res.Err != nil {
		t.Errorf("other job at the same time: %v", res.Err)
	}
	if res := applyAt(t, f, 3, 22, grant("report", t0.Add(5*time.Second))); res.Err != nil {
		t.Errorf("same job at the next time: %v", res.Err)
	}
	if res := applyAt(t, f, 3, 23, grant("nope", t0)); !errors.Is(res.Err, jobs.ErrUnknownJob) {
		t.Errorf("unknown job: err = %v, want ErrUnknownJob", res.Err)
	}
}

func TestFSM_CompleteIsIdempotent(t *testing.T) {
	f := withJobs(t, "report")
	g := applyAt(t, f, 2, 10, grant("report", t0))
	id := g.Run.Attempts[0].ID
	applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpStart, Start: &replicated.StartCmd{Attempt: id, At: t0}})
	zero := 0
	done := replicated.Completion{Attempt: id, State: jobs.Succeeded, ExitCode: &zero, StoreOutcome: "applied", EndedAt: t0.Add(time.Second)}
	if res := applyAt(t, f, 2, 12, replicated.Command{Op: replicated.OpComplete, Complete: &done}); res.Err != nil || res.Run.State != jobs.Succeeded {
		t.Fatalf("complete: %v, state %s", res.Err, res.Run.State)
	}
	// A late, different report of the same attempt changes nothing.
	late := replicated.Completion{Attempt: id, State: jobs.Failed, Error: "late", EndedAt: t0.Add(time.Minute)}
	res := applyAt(t, f, 2, 13, replicated.Command{Op: replicated.OpComplete, Complete: &late})
	if res.Err != nil || res.Run.State != jobs.Succeeded || res.Run.Attempts[0].Error != "" {
		t.Errorf("after late completion: err %v, run %+v", res.Err, res.Run)
	}
}

// snapshotRestored returns a new FSM restored from a snapshot of f.
func snapshotRestored(t *testing.T, f *FSM) *FSM {
	t.Helper()
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	return g
}

// snapshotBytes is what a snapshot of f persists.
func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// unversionedSnapshot is a snapshot of f as written before snapshots
// carried their log version.
func unversionedSnapshot(t *testing.T, f *FSM) []byte {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(snapshotBytes(t, f), &top); err != nil {
		t.Fatal(err)
	}
	delete(top, "log_version")
	b, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFSM_SnapshotRestoreKeepsUniqueness(t *testing.T) {
	f := withJobs(t, "report")
	applyAt(t, f, 2, 10, grant("report", t0))
	g := snapshotRestored(t, f)
	if res := applyAt(t, g, 3, 30, grant("report", t0)); !errors.Is(res.Err, jobs.ErrDuplicateRun) {
		t.Errorf("grant after restore: err = %v, want ErrDuplicateRun", res.Err)
	}
}

func TestFSM_TrimKeepsDroppedRunsUngrantable(t *testing.T) {
	f := withJobs(t, "report")
	f.MaxRuns = 3
	idx := uint64(10)
	for i := range 5 {
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		g := applyAt(t, f, 2, idx, grant("report", at))
		idx++
		c := replicated.Completion{Attempt: g.Run.Attempts[0].ID, State: jobs.Succeeded, EndedAt: at}
		applyAt(t, f, 2, idx, replicated.Command{Op: replicated.OpComplete, Complete: &c})
		idx++
	}
	if got := len(f.Runs(RunFilter{})); got > 4 {
		t.Errorf("kept %d runs, want at most MaxRuns+1", got)
	}
	if res := applyAt(t, f, 2, idx, grant("report", t0)); !errors.Is(res.Err, jobs.ErrDuplicateRun) {
		t.Errorf("re-grant of a trimmed run: err = %v, want ErrDuplicateRun", res.Err)
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// A run whose attempt failed with retries left has not finished: it is
// pending until its retry is granted, and finishes with the last attempt's
// state. Removing its job, or a replacing run, finishes it without a retry.
func TestFSM_RunAwaitingRetryIsNotFinished(t *testing.T) {
	f := NewFSM()
	spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "false", Retries: 1}
	applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
	complete := func(index uint64, id string, st jobs.State) jobs.Run {
		t.Helper()
		c := replicated.Completion{Attempt: id, State: st, Error: "exit code 1", EndedAt: t0.Add(time.Second)}
		res := applyAt(t, f, 2, index, replicated.Command{Op: replicated.OpComplete, Complete: &c})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res.Run
	}

	run := applyAt(t, f, 2, 10, grant("report", t0)).Run
	run = complete(11, run.Attempts[0].ID, jobs.Failed)
	if run.State != jobs.Pending || !AwaitsRetry(run) || len(f.OpenRuns("report")) != 1 {
		t.Fatalf("after a failed attempt with a retry left: run %s (awaits retry %v), want pending and open", run.State, AwaitsRetry(run))
	}
	if load := f.OpenLoadByWorker()["w1"]; load != 0 {
		t.Errorf("a run awaiting its retry counts %d towards w1's load, want 0", load)
	}
	run = applyAt(t, f, 2, 12, replicated.Command{Op: replicated.OpRetry, Retry: &replicated.RetryCmd{Run: run.ID, After: 1, Worker: "w1", At: t0}}).Run
	run = complete(13, run.Attempts[1].ID, jobs.Failed)
	if run.State != jobs.Failed || AwaitsRetry(run) {
		t.Errorf("after the last attempt failed: run %s, want failed", run.State)
	}

	// Overlap replace cancels a run waiting for its retry; no retry after.
	next := applyAt(t, f, 2, 20, grant("report", t0.Add(5*time.Second))).Run
	next = complete(21, next.Attempts[0].ID, jobs.Failed)
	res := applyAt(t, f, 2, 22, replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: next.Attempts[0].ID, State: jobs.Cancelled, Reason: "replaced", At: t0}})
	if res.Err != nil || res.Run.State != jobs.Cancelled {
		t.Fatalf("cancel a run awaiting retry: %v, run %s; want cancelled", res.Err, res.Run.State)
	}
	if res := applyAt(t, f, 2, 23, replicated.Command{Op: replicated.OpRetry, Retry: &replicated.RetryCmd{Run: next.ID, After: 1, Worker: "w1", At: t0}}); !errors.Is(res.Err, jobs.ErrStaleAttempt) || len(res.Run.Attempts) != 1 {
		t.Errorf("retry of a cancelled run: %v with %d attempts, want refused", res.Err, len(res.Run.Attempts))
	}

	// Its lease was taken (no worker to take over), the run was replaced,
	// and then the partitioned worker reports: the run stays cancelled.
	lost := applyAt(t, f, 2, 24, grant("report", t0.Add(7*time.Second))).Run
	applyAt(t, f, 2, 25, replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: lost.Attempts[0].ID, State: jobs.Lost, Reason: "lease expired", At: t0}})
	applyAt(t, f, 2, 26, replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: lost.Attempts[0].ID, State: jobs.Cancelled, Reason: "replaced", At: t0}})
	if late := complete(27, lost.Attempts[0].ID, jobs.Failed); late.State != jobs.Cancelled || AwaitsRetry(late) {
		t.Errorf("late failure of a replaced run: %s, want cancelled with no retry", late.State)
	}

	// A job set without the job finishes its runs that wait for a retry.
	last := applyAt(t, f, 2, 30, grant("report", t0.Add(10*time.Second))).Run
	complete(31, last.Attempts[0].ID, jobs.TimedOut)
	applyAt(t, f, 2, 32, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Source: "test"}})
	if got, _ := f.Run(last.ID); got.State != jobs.TimedOut {
		t.Errorf("run awaiting retry of a removed job: %s, want timed_out", got.State)
	}
}

// A snapshot from before runs waited for retries as pending holds such a
// run as failed: restored, it is pending again and gets its retry.
func TestFSM_RestoreSettlesRunsAwaitingRetry(t *testing.T) {
	f := NewFSM()
	spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "false", Retries: 2}
	applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
	run := applyAt(t, f, 2, 10, grant("report", t0)).Run
	c := replicated.Completion{Attempt: run.Attempts[0].ID, State: jobs.Failed, EndedAt: t0}
	applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpComplete, Complete: &c})
	f.st.Runs[run.ID].State = jobs.Failed // as the old rule left it
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(unversionedSnapshot(t, f)))); err != nil { // as snapshots of then were
		t.Fatal(err)
	}
	if got, _ := g.Run(run.ID); !AwaitsRetry(got) {
		t.Errorf("restored run awaiting retry: %s, want pending", got.State)
	}
}

// A snapshot restores every run as the replicas that applied the log have
// it: a run that failed for good stays failed, though its job was given
// retries since (a job set re-settles only runs that wait for a retry).
func TestFSM_RestoreKeepsAFinishedRunFinished(t *testing.T) {
	f := NewFSM()
	spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "false"}
	applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
	run := applyAt(t, f, 2, 10, grant("report", t0)).Run
	c := replicated.Completion{Attempt: run.Attempts[0].ID, State: jobs.Failed, EndedAt: t0}
	applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpComplete, Complete: &c})
	spec.Retries = 2
	applyAt(t, f, 2, 12, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
	live, _ := f.Run(run.ID)
	restored, _ := snapshotRestored(t, f).Run(run.ID)
	if live.State != jobs.Failed || restored.State != live.State {
		t.Errorf("run %s: %s on the replica that applied the log, %s restored from its snapshot; want failed on both", run.ID, live.State, restored.State)
	}
}

// An audit entry joins the replicated trail (and survives a snapshot);
// it may not pose as an entry the FSM makes itself, and its detail is
// bounded whatever the proposer sends.
func TestFSM_Audit(t *testing.T) {
	f := withJobs(t, "report")
	audit := func(kind, detail string) replicated.Command {
		return replicated.Command{Op: replicated.OpAudit, Audit: &replicated.AuditCmd{Kind: kind, Node: "n2", Detail: detail, At: t0}}
	}
	if res := applyAt(t, f, 2, 10, audit(jobs.EventLoginFailed, "5 failed logins from 10.1.2.3; locked out for 30s")); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, kind := range []string{"", jobs.EventGranted, jobs.EventElected, strings.Repeat("k", 33)} {
		if res := applyAt(t, f, 2, 11, audit(kind, "x")); !errors.Is(res.Err, jobs.ErrInvalidConfig) {
			t.Errorf("audit of kind %q: err = %v, want ErrInvalidConfig", kind, res.Err)
		}
	}
	// An entry of version 1 took any kind the FSM does not make, and
	// still does; from version 2 only known kinds are taken.
	if res := applyAt(t, f, 2, 12, audit("future_kind", "x")); !errors.Is(res.Err, jobs.ErrInvalidConfig) {
		t.Errorf("version 2 audit of an unknown kind: err = %v, want ErrInvalidConfig", res.Err)
	}
	if res := applyV1(t, f, 2, 12, audit("future_kind", strings.Repeat("é", 1000))); res.Err != nil {
		t.Fatalf("a version 1 audit entry of a kind this version does not know: %v", res.Err)
	}
	evs := snapshotRestored(t, f).Events(0, 0)
	var got []jobs.Event
	for _, e := range evs {
		if e.Kind != jobs.EventJobSet {
			got = append(got, e)
		}
	}
	if len(got) != 2 {
		t.Fatalf("events after restore = %+v, want the two audit entries", got)
	}
	if e := got[0]; e.Kind != jobs.EventLoginFailed || e.Node != "n2" || e.Index != 10 || !e.Time.Equal(t0) ||
		e.Detail != "5 failed logins from 10.1.2.3; locked out for 30s" {
		t.Errorf("audit event = %+v", e)
	}
	if d := got[1].Detail; len(d) > MaxAuditDetail+3 || !utf8.ValidString(d) || !strings.HasSuffix(d, "...") {
		t.Errorf("long detail kept as %d bytes (valid UTF-8 %v), want at most %d and cut with ...", len(d), utf8.ValidString(d), MaxAuditDetail+3)
	}
}

// The FSM mints tokens only inside the range every store accepts: a grant,
// retry or takeover in a Raft entry whose term or index is beyond 2^63-1
// is refused with ErrTokenRange (recorded as an event once per term,
// counted each time), and grants nothing. (2^63-1, 2^63-1) itself is
// granted.
func TestFSM_MintsOnlyTokensInRange(t *testing.T) {
	const top = math.MaxInt64
	f := NewFSM()
	spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "false", Retries: 3, Overlap: jobs.OverlapAllow}
	applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
	refusals := func() []jobs.Event {
		var out []jobs.Event
		for _, e := range f.Events(0, 0) {
			if e.Kind == jobs.EventGrantRefused {
				out = append(out, e)
			}
		}
		return out
	}

	// The term of the heartbeat in issue 11, and 2^63 in term or index.
	for i, entry := range []struct{ term, index uint64 }{{1<<63 + 3, 57}, {1<<63 + 3, 58}, {1 << 63, 59}, {5, 1 << 63}} {
		at := t0.Add(time.Duration(i) * time.Second)
		res := applyAt(t, f, entry.term, entry.index, grant("report", at))
		if !errors.Is(res.Err, jobs.ErrTokenRange) || !strings.Contains(res.Err.Error(), "cannot make a fence token") {
			t.Fatalf("grant at term %d index %d: err = %v, want ErrTokenRange", entry.term, entry.index, res.Err)
		}
		if _, ok := f.Run(jobs.RunID("report", at)); ok {
			t.Errorf("grant at term %d index %d recorded a run", entry.term, entry.index)
		}
	}
	if got := refusals(); len(got) != 3 || got[0].Epoch != 1<<63+3 || got[1].Epoch != 1<<63 || got[2].Epoch != 5 || !strings.Contains(got[0].Detail, "not granted") {
		t.Errorf("refusal events %+v: want one per term (3)", got)
	}
	if n := f.Counters()["grants_refused"]; n != 4 {
		t.Errorf("grants_refused = %d, want 4", n)
	}
	if n := f.Counters()["grants"]; n != 0 {
		t.Errorf("grants = %d, want 0", n)
	}

	// The edge of the range is granted, and a retry or takeover past it
	// is refused.
	res := applyAt(t, f, top, top-3, grant("report", t0.Add(time.Minute)))
	if res.Err != nil {
		t.Fatalf("grant at (2^63-1, 2^63-4): %v", res.Err)
	}
	complete := func(index uint64, attempt string) {
		c := replicated.Completion{Attempt: attempt, State: jobs.Failed, EndedAt: t0}
		if r := applyAt(t, f, top, index, replicated.Command{Op: replicated.OpComplete, Complete: &c}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	run := res.Run
	complete(top-2, run.Attempts[0].ID)
	res = applyAt(t, f, top, top, replicated.Command{Op: replicated.OpRetry, Retry: &replicated.RetryCmd{Run: run.ID, After: 1, Worker: "w1", At: t0}})
	if res.Err != nil || len(res.Run.Attempts) != 2 || res.Run.Attempts[1].Token != (jobs.Fence{Epoch: top, Seq: top}) {
		t.Fatalf("retry at (2^63-1, 2^63-1): %+v, %v; want a second attempt with that token", res.Run.Attempts, res.Err)
	}
	complete(top, res.Run.Attempts[1].ID) // an index repeated: only the token range matters here
	res = applyAt(t, f, 1<<63, 1<<63, replicated.Command{Op: replicated.OpRetry, Retry: &replicated.RetryCmd{Run: run.ID, After: 2, Worker: "w1", At: t0}})
	if !errors.Is(res.Err, jobs.ErrTokenRange) || len(res.Run.Attempts) != 2 {
		t.Errorf("retry at 2^63: %d attempts, %v; want ErrTokenRange and none added", len(res.Run.Attempts), res.Err)
	}

	taken := applyAt(t, f, top, top-1, grant("report", t0.Add(2*time.Minute))).Run
	res = applyAt(t, f, 1<<63, 1<<63, replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: taken.Attempts[0].ID, State: jobs.Lost, Reason: "lease expired", Worker: "w2", At: t0}})
	if res.Err != nil || len(res.Run.Attempts) != 1 || res.Run.Attempts[0].State != jobs.Lost || !AwaitsRetry(res.Run) {
		t.Errorf("takeover at 2^63: %+v, %v; want the expiry applied, no new attempt, the run awaiting a retry", res.Run, res.Err)
	}
}

package scheduler

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// A run that stays open (a long job) does not keep the runs of other jobs
// granted after it: the state keeps the newest MaxRuns finished runs and
// the open one, and a dropped run stays ungrantable. Entries of log
// version 6 and before still trim as they did, stopping at the open run,
// so servers of both releases reach the same state from the same log.
func TestFSM_OpenRunDoesNotKeepLaterRuns(t *testing.T) {
	for _, v := range []int{6, LogVersion} {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			f := withJobs(t, "long", "busy")
			f.MaxRuns = 3
			apply := func(index uint64, c command) applyResult {
				t.Helper()
				if index == 2 { // the term's election entry first, as applyAt does
					applyRaw(t, f, 1, index, rawEntry(t, v, command{Op: opElected, Elected: &electedCmd{Node: "test-leader", At: t0}}))
				}
				res := applyRaw(t, f, 1, index, rawEntry(t, v, c))
				if res.Err != nil {
					t.Fatalf("entry %d: %v", index, res.Err)
				}
				return res
			}
			long := apply(2, grant("long", t0)).Run.ID
			idx := uint64(3)
			var first string
			for i := range 100 {
				at := t0.Add(time.Duration(i+1) * time.Minute)
				id := apply(idx, grant("busy", at)).Run.ID
				if i == 0 {
					first = id
				}
				c := Completion{Attempt: jobs.AttemptID(id, 1), State: jobs.Failed, EndedAt: at}
				apply(idx+1, command{Op: opComplete, Complete: &c})
				idx += 2
			}
			kept := len(f.Runs(RunFilter{}))
			if _, ok := f.Run(long); !ok {
				t.Fatalf("the open run was dropped")
			}
			if v < 7 {
				if kept != 101 {
					t.Errorf("version %d kept %d runs, want all 101 (it stops at the open run)", v, kept)
				}
				return
			}
			if kept != f.MaxRuns+1 {
				t.Errorf("kept %d runs, want MaxRuns (%d) finished ones and the open one", kept, f.MaxRuns)
			}
			if got := len(f.Runs(RunFilter{Job: "busy"})); got != f.MaxRuns {
				t.Errorf("busy has %d runs kept, want the newest %d", got, f.MaxRuns)
			}
			if res := applyRaw(t, f, 1, idx, rawEntry(t, v, grant("busy", t0.Add(time.Minute)))); !errors.Is(res.Err, jobs.ErrDuplicateRun) {
				t.Errorf("re-grant of the dropped run %s: err = %v, want ErrDuplicateRun", first, res.Err)
			}
			// Newest first, and the open run still the oldest.
			runs := f.Runs(RunFilter{})
			if runs[len(runs)-1].ID != long {
				t.Errorf("oldest run kept = %s, want the open %s", runs[len(runs)-1].ID, long)
			}
			g := snapshotRestored(t, f)
			if got := len(g.Runs(RunFilter{})); got != kept {
				t.Errorf("restored state has %d runs, want %d", got, kept)
			}
		})
	}
}

// trimFSM has the jobs of specs, plus busy (every 5s, unrelated to them),
// and keeps MaxRuns runs.
func trimFSM(t *testing.T, maxRuns int, specs ...jobs.Spec) *FSM {
	t.Helper()
	f := NewFSM()
	f.MaxRuns = maxRuns
	specs = append(specs, jobs.Spec{Name: "busy", Schedules: []string{"@every 5s"}, Shell: "true"})
	if res := applyAt(t, f, 1, 1, command{Op: opSetJobs, SetJobs: &setJobsCmd{Jobs: specs, Source: "test"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	return f
}

// passBusy grants and fails n runs of busy from entry index on (each
// scheduled by its entry's index), so that the state goes well past
// MaxRuns; it returns the next index.
func passBusy(t *testing.T, f *FSM, index uint64, n int) uint64 {
	t.Helper()
	for range n {
		at := t0.Add(time.Hour + time.Duration(index)*5*time.Second)
		res := applyAt(t, f, 2, index, grant("busy", at))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		c := Completion{Attempt: res.Run.Attempts[0].ID, State: jobs.Failed, EndedAt: at}
		applyAt(t, f, 2, index+1, command{Op: opComplete, Complete: &c})
		index += 2
	}
	return index
}

// Dropping a run moves its job's horizon up to its time for good, so
// trim keeps what a follow-up decision still needs, however many runs go
// by meanwhile, and the follower's run is decided when its parent ends.
func TestFSM_TrimKeepsWhatAFollowerStillNeeds(t *testing.T) {
	t.Run("a later run of the follower, while its parent's earlier run is open", func(t *testing.T) {
		f := trimFSM(t, 3,
			jobs.Spec{Name: "etl", Schedules: []string{"@every 5s"}, Shell: "true", Overlap: jobs.OverlapForbid},
			jobs.Spec{Name: "report", After: []string{"etl"}, Shell: "true"})
		long := applyAt(t, f, 2, 10, grant("etl", t0))
		// The next fire time is skipped (forbid), and so report's run for it.
		if res := applyAt(t, f, 2, 11, grant("etl", t0.Add(5*time.Second))); res.Err != nil || res.Run.State != jobs.Skipped {
			t.Fatalf("second etl grant: %v, %+v; want skipped", res.Err, res.Run)
		}
		if r, ok := f.Run(jobs.RunID("report", t0.Add(5*time.Second))); !ok || r.State != jobs.Skipped {
			t.Fatalf("report's run for the skipped time: %+v, %v; want skipped", r, ok)
		}
		idx := passBusy(t, f, 12, 20)
		// The long run succeeds: report follows it.
		applyAt(t, f, 2, idx, complete(long.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"report": "w1"}))
		r, ok := f.Run(jobs.RunID("report", t0))
		if !ok || r.State != jobs.Pending || len(r.Attempts) != 1 {
			t.Fatalf("report's run for the long etl run: %+v, %v; want granted", r, ok)
		}
		// Once nothing of theirs is open, their finished runs go too.
		applyAt(t, f, 2, idx+1, complete(r.Attempts[0].ID, jobs.Succeeded, 0, nil))
		passBusy(t, f, idx+2, 5)
		if got := len(f.Runs(RunFilter{})); got > f.MaxRuns {
			t.Errorf("kept %d runs once nothing was open, want at most %d", got, f.MaxRuns)
		}
	})
	t.Run("a parent's finished run, before the other parent's run is granted", func(t *testing.T) {
		f := trimFSM(t, 3,
			jobs.Spec{Name: "long", Schedules: []string{"@every 5s"}, Shell: "true", Overlap: jobs.OverlapAllow},
			jobs.Spec{Name: "a", Schedules: []string{"@every 5s"}, Shell: "true"},
			jobs.Spec{Name: "b", Schedules: []string{"@every 5s"}, Shell: "true"},
			jobs.Spec{Name: "d", After: []string{"a", "b"}, Shell: "true"})
		// As many open runs as the state keeps finished ones.
		for i := range 3 {
			applyAt(t, f, 2, uint64(10+i), grant("long", t0.Add(-time.Duration(i+1)*5*time.Second)))
		}
		ra := applyAt(t, f, 2, 20, grant("a", t0))
		applyAt(t, f, 2, 21, complete(ra.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"d": "w1"}))
		idx := passBusy(t, f, 22, 5)
		rb := applyAt(t, f, 2, idx, grant("b", t0))
		applyAt(t, f, 2, idx+1, complete(rb.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"d": "w1"}))
		if r, ok := f.Run(jobs.RunID("d", t0)); !ok || r.State != jobs.Pending || len(r.Attempts) != 1 {
			t.Errorf("d's run once both parents succeeded: %+v, %v; want granted", r, ok)
		}
	})
	t.Run("a parent's finished run, while the other parent's is open", func(t *testing.T) {
		f := trimFSM(t, 3,
			jobs.Spec{Name: "a", Schedules: []string{"@every 5s"}, Shell: "true"},
			jobs.Spec{Name: "b", Schedules: []string{"@every 5s"}, Shell: "true"},
			jobs.Spec{Name: "d", After: []string{"a", "b"}, Shell: "true"})
		ra := applyAt(t, f, 2, 10, grant("a", t0))
		rb := applyAt(t, f, 2, 11, grant("b", t0))
		applyAt(t, f, 2, 12, complete(rb.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"d": "w1"}))
		idx := passBusy(t, f, 13, 20)
		applyAt(t, f, 2, idx, complete(ra.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"d": "w1"}))
		if r, ok := f.Run(jobs.RunID("d", t0)); !ok || r.State != jobs.Pending || len(r.Attempts) != 1 {
			t.Errorf("d's run once both parents succeeded: %+v, %v; want granted", r, ok)
		}
	})
}

// Runs of linked jobs that finished before the oldest open run go like any
// others.
func TestFSM_TrimDropsLinkedRunsOlderThanTheirOldestOpenRun(t *testing.T) {
	f := trimFSM(t, 3,
		jobs.Spec{Name: "etl", Schedules: []string{"@every 5s"}, Shell: "true", Overlap: jobs.OverlapAllow},
		jobs.Spec{Name: "report", After: []string{"etl"}, Shell: "true"})
	first := applyAt(t, f, 2, 10, grant("etl", t0))
	applyAt(t, f, 2, 11, complete(first.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"report": "w1"}))
	report, ok := f.Run(jobs.RunID("report", t0))
	if !ok {
		t.Fatal("report did not follow etl")
	}
	applyAt(t, f, 2, 12, complete(report.Attempts[0].ID, jobs.Succeeded, 0, nil))
	long := applyAt(t, f, 2, 13, grant("etl", t0.Add(5*time.Second)))
	passBusy(t, f, 14, 20)
	for _, id := range []string{first.Run.ID, report.ID} {
		if _, ok := f.Run(id); ok {
			t.Errorf("%s, finished before the open %s, is still kept", id, long.Run.ID)
		}
	}
	if _, ok := f.Run(long.Run.ID); !ok {
		t.Errorf("the open %s was dropped", long.Run.ID)
	}
}

// A job with fire times queued by a backfill keeps its runs behind an open
// run, as every job did before version 7: dropping one would put the
// queued times behind the horizon, and the backfill would lose them.
func TestFSM_TrimKeepsABackfillingJobsRunsBehindAnOpenRun(t *testing.T) {
	f := trimFSM(t, 3,
		jobs.Spec{Name: "long", Schedules: []string{"@every 5s"}, Shell: "true"},
		jobs.Spec{Name: "j", Schedules: []string{"@every 5s"}, Shell: "true", Overlap: jobs.OverlapAllow})
	applyAt(t, f, 2, 9, grant("long", t0))
	past := []time.Time{t0.Add(-time.Hour), t0.Add(-time.Hour + 5*time.Second)}
	if res := applyAt(t, f, 2, 10, backfillCmdOf("j", 1, past...)); res.Err != nil || len(res.Backfill.Create) != 2 {
		t.Fatalf("backfill: %v, %+v", res.Err, res.Backfill)
	}
	now := applyAt(t, f, 2, 11, grant("j", t0))
	c := Completion{Attempt: now.Run.Attempts[0].ID, State: jobs.Succeeded, EndedAt: t0}
	applyAt(t, f, 2, 12, command{Op: opComplete, Complete: &c})
	idx := passBusy(t, f, 13, 20)
	for i, at := range past {
		res := applyAt(t, f, 2, idx+uint64(2*i), backfillGrant("j", at))
		if res.Err != nil {
			t.Fatalf("backfill grant of %s: %v", at, res.Err)
		}
		c := Completion{Attempt: res.Run.Attempts[0].ID, State: jobs.Succeeded, EndedAt: at}
		applyAt(t, f, 2, idx+uint64(2*i)+1, command{Op: opComplete, Complete: &c})
	}
	if got := f.BackfillPending("j"); got != 0 {
		t.Errorf("%d fire times still queued, want 0", got)
	}
	// Queue drained: j's runs go like any others now, and a dropped one
	// stays taken.
	passBusy(t, f, idx+4, 5)
	if _, ok := f.Run(now.Run.ID); ok {
		t.Errorf("j's run %s kept after the backfill drained", now.Run.ID)
	}
	if res := applyAt(t, f, 2, idx+20, grant("j", t0)); !errors.Is(res.Err, jobs.ErrDuplicateRun) {
		t.Errorf("grant of the dropped %s: %v, want ErrDuplicateRun", now.Run.ID, res.Err)
	}
}

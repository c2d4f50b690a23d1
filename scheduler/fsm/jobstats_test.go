package fsm

import (
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Per-job figures count each run once, when it finishes, skipped fire
// times included; survive a snapshot; and leave with their job.
func TestFSM_JobStats(t *testing.T) {
	f := withJobs(t, "report", "other")
	g := applyAt(t, f, 2, 10, grant("report", t0))
	id := g.Run.Attempts[0].ID
	zero := 0
	done := replicated.Completion{Attempt: id, State: jobs.Succeeded, ExitCode: &zero, StoreOutcome: "applied", EndedAt: t0.Add(3 * time.Second)}
	applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpComplete, Complete: &done})
	applyAt(t, f, 2, 12, replicated.Command{Op: replicated.OpComplete, Complete: &done}) // again: no second count
	applyAt(t, f, 2, 13, replicated.Command{Op: replicated.OpSkipRange, SkipRange: &replicated.SkipRangeCmd{SkipRange: jobs.SkipRange{Job: "report", From: t0.Add(time.Minute), To: t0.Add(2 * time.Minute), Count: 2, Reason: "missed"}}})
	// A run still open is not counted.
	applyAt(t, f, 2, 14, grant("other", t0))

	check := func(f *FSM, what string) {
		t.Helper()
		page, more := f.JobStatsPage(10)
		r := page["report"]
		if got := r.Runs[jobs.Succeeded]; got != 1 {
			t.Errorf("%s: succeeded = %d, want 1", what, got)
		}
		if got := r.Runs[jobs.Skipped]; got != 2 {
			t.Errorf("%s: skipped = %d, want 2", what, got)
		}
		if !r.LastSuccess.Equal(t0.Add(3 * time.Second)) {
			t.Errorf("%s: last success = %s, want %s", what, r.LastSuccess, t0.Add(3*time.Second))
		}
		if _, ok := page["other"]; ok || more != 0 {
			t.Errorf("%s: figures for a job with no finished run (%v), more %d", what, page["other"], more)
		}
	}
	check(f, "applied")
	check(snapshotRestored(t, f), "restored")

	applyAt(t, f, 2, 15, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{{Name: "other", Schedules: []string{"@every 5s"}, Shell: "true"}}, Source: "test"}})
	if page, _ := f.JobStatsPage(10); len(page) != 0 {
		t.Errorf("figures of a removed job stay: %v", page)
	}
}

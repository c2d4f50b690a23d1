package fsm

import (
	"slices"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// ExportJobSet hands out the set as applied, with the jobs an operator
// paused beside it, and the summary of the same entry, without copying
// the set: a later apply replaces the slice an export holds and leaves
// it as it was.
func TestFSM_ExportJobSet(t *testing.T) {
	f := NewFSM()
	set := []jobs.Spec{{Name: "gamma", Schedules: []string{"@daily"}}, {Name: "alpha", Schedules: []string{"@daily"}, Paused: true}, {Name: "beta", Schedules: []string{"@daily"}}}
	applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: set, Source: "test"}})
	applyAt(t, f, 1, 2, replicated.Command{Op: replicated.OpPause, Pause: &replicated.PauseCmd{Job: "gamma", Paused: true, At: t0}})
	applyAt(t, f, 1, 3, replicated.Command{Op: replicated.OpPause, Pause: &replicated.PauseCmd{Job: "beta", Paused: true, At: t0}})

	e := f.ExportJobSet()
	if got := []string{e.Jobs[0].Name, e.Jobs[1].Name, e.Jobs[2].Name}; !slices.Equal(got, []string{"gamma", "alpha", "beta"}) {
		t.Errorf("jobs %q, want the set's order", got)
	}
	if e.Jobs[0].Paused || !e.Jobs[1].Paused {
		t.Errorf("paused as applied: gamma %v, alpha %v; want false, true", e.Jobs[0].Paused, e.Jobs[1].Paused)
	}
	if !slices.Equal(e.OperatorPaused, []string{"beta", "gamma"}) {
		t.Errorf("operator paused %q, want beta, gamma", e.OperatorPaused)
	}
	if info := f.JobSetInfo(); e.Info != info || e.Info.Count != 3 {
		t.Errorf("info %+v, want %+v", e.Info, info)
	}
	if &e.Jobs[0] != &f.st.Jobs[0] {
		t.Error("the export copied the set")
	}

	applyAt(t, f, 1, 4, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{{Name: "delta", Schedules: []string{"@daily"}}}, Source: "test"}})
	if len(e.Jobs) != 3 || e.Jobs[0].Name != "gamma" || e.Info.Count != 3 {
		t.Errorf("an apply changed what an earlier export holds: %d jobs, first %q", len(e.Jobs), e.Jobs[0].Name)
	}
	if got := f.ExportJobSet(); len(got.Jobs) != 1 || got.Jobs[0].Name != "delta" {
		t.Errorf("after the apply: %+v", got.Jobs)
	}
}

package scheduler

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// Changes against the set the leader applied make the set they describe
// (a job changed in place, one removed, one added last), with the hash of
// that set, in one job set difference; changes against another set, or
// that are invalid, change nothing.
func TestSetJobsChanges(t *testing.T) {
	l, sm := newTestLeader(t)
	r := l.s.Raft.(*fakeRaft)
	entries := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.sizes)
	}
	specs := jobstest.Daily(2_000)
	base, err := l.s.SetJobs(t.Context(), slices.Clone(specs), "test", nil)
	if err != nil {
		t.Fatal(err)
	}

	edited := specs[700]
	edited.Command = []string{"/bin/false"}
	added := jobstest.Daily(2_001)[2_000]
	want := slices.Concat(specs[:700], []jobs.Spec{edited}, specs[701:1200], specs[1201:], []jobs.Spec{added})
	before := entries()
	hash, n, err := l.s.SetJobsChanges(t.Context(), JobChanges{Base: base, Upsert: []jobs.Spec{added, edited, specs[5]}, Remove: []string{specs[1200].Name}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if hash != jobs.HashSpecs(want) || n != len(want) {
		t.Errorf("answered %s, %d jobs; want %s, %d", hash, n, jobs.HashSpecs(want), len(want))
	}
	if got := sm.JobSetBase(); got.Hash != hash || !reflect.DeepEqual(jobs.Values(got.Jobs), want) {
		t.Errorf("the replicated set: hash %s, %d jobs; want the changed set, hash %s", got.Hash, len(got.Jobs), hash)
	}
	r.mu.Lock()
	heads := slices.Clone(r.heads[before:])
	r.mu.Unlock()
	if len(heads) != 1 || !strings.Contains(heads[0], `"op":"set_jobs_diff"`) {
		t.Errorf("the changes appended %q; want one job set difference", heads)
	}
	// A job sent as the set holds it is not a change: the FSM's record
	// of the apply counts two (edited, added) and one removed.
	events := sm.Events(0, 0)
	if last := events[len(events)-1]; !strings.HasSuffix(last.Detail, ": 2 added or changed, 1 removed") {
		t.Errorf("the apply's event: %q; want 2 added or changed, 1 removed", last.Detail)
	}

	bad := edited
	bad.Schedules = []string{"61 * * * *"}
	// The last case makes the others moot: it comes last.
	for _, c := range []struct {
		name string
		ch   JobChanges
		want error
	}{
		{"against another set", JobChanges{Base: base, Upsert: []jobs.Spec{edited}}, fsm.ErrJobsDiffBase},
		{"an invalid job", JobChanges{Base: hash, Upsert: []jobs.Spec{bad}}, jobs.ErrInvalidConfig},
		{"a job removed and sent", JobChanges{Base: hash, Upsert: []jobs.Spec{edited}, Remove: []string{edited.Name}}, jobs.ErrInvalidConfig},
		{"a removal of no job", JobChanges{Base: hash, Remove: []string{"nope"}}, jobs.ErrInvalidConfig},
		{"a job removed twice", JobChanges{Base: hash, Remove: []string{added.Name, added.Name}}, jobs.ErrInvalidConfig},
		{"a job sent twice", JobChanges{Base: hash, Upsert: []jobs.Spec{added, added}}, jobs.ErrInvalidConfig},
		{"a job after another", JobChanges{Base: hash, Upsert: []jobs.Spec{{Name: "then", After: []string{added.Name}, Command: []string{"/bin/true"}}}}, ErrChangesNeedSet},
		{"a job of a group", JobChanges{Base: hash, Upsert: []jobs.Spec{{Name: "grouped", Group: "g", Schedules: []string{"@daily"}, Command: []string{"/bin/true"}}}}, ErrChangesNeedSet},
		{"a set another leader made", JobChanges{Base: hash}, ErrChangesNeedSet},
	} {
		name := c.name
		if name == "a set another leader made" {
			l.s.setJobs.Lock()
			l.s.checked = checkedSet{}
			l.s.setJobs.Unlock()
		}
		before := entries()
		if _, _, err := l.s.SetJobsChanges(t.Context(), c.ch, "test"); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", name, err, c.want)
		}
		if got := sm.JobSetBase(); got.Hash != hash || entries() != before {
			t.Errorf("%s: the set is %s after %d entries; want it unchanged (%s), nothing appended", name, got.Hash, entries()-before, hash)
		}
	}
}

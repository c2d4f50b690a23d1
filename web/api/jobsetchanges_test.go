package api

import (
	"errors"
	"slices"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// The changes make the set a file now says: a job changed in its place,
// a new one last, a removed one gone, every other job the set's own; a
// name twice, or the removal of a job the set lacks, is refused.
func TestChangedSet(t *testing.T) {
	spec := func(name, schedule string) jobs.Spec {
		return jobs.Spec{Name: name, Schedules: []string{schedule}, Command: []string{"/bin/true"}}
	}
	cur := []jobs.Spec{spec("a", "@daily"), spec("b", "@daily"), spec("c", "@daily"), spec("d", "@daily")}
	specs, kept, removed, err := changedSet(jobs.Addrs(cur), []jobs.Spec{spec("e", "@hourly"), spec("b", "@hourly")}, []string{"c"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range specs {
		got = append(got, s.Name+" "+s.Schedules[0])
	}
	if want := []string{"a @daily", "b @hourly", "d @daily", "e @hourly"}; !slices.Equal(got, want) {
		t.Errorf("the changed set is %q, want %q", got, want)
	}
	if want := []bool{true, false, true, false}; !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	if len(removed) != 1 || removed[0].Name != "c" {
		t.Errorf("removed %v, want c", removed)
	}
	if cur[1].Schedules[0] != "@daily" || len(cur) != 4 {
		t.Errorf("the set itself was changed: %v", cur)
	}

	for name, c := range map[string]struct {
		upsert []jobs.Spec
		remove []string
	}{
		"a job removed and sent":           {[]jobs.Spec{spec("a", "@hourly")}, []string{"a"}},
		"a job sent twice":                 {[]jobs.Spec{spec("e", "@hourly"), spec("e", "@daily")}, nil},
		"a job removed twice":              {nil, []string{"a", "a"}},
		"a removal of a job the set lacks": {nil, []string{"a", "x"}},
	} {
		if _, _, _, err := changedSet(jobs.Addrs(cur), c.upsert, c.remove); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: %v; want a bad request", name, err)
		}
	}
}

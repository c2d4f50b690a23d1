package setdiff

import (
	"slices"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
)

// Of answers the same for a set edited in place (compared position by
// position) as for the same jobs in another order (compared by name), and
// for new jobs wherever they come.
func TestOf_InPlaceOrReordered(t *testing.T) {
	first := []jobs.Spec{jobstest.EveryMinute("c", "true"), jobstest.EveryMinute("a", "true"), jobstest.EveryMinute("b", "true")}
	at := map[string]int{"c": 0, "a": 1, "b": 2}
	changed := jobstest.EveryMinute("a", "false")
	// A job as name=shell: the job sent must be next's, not cur's.
	names := func(specs []jobs.Spec) (out []string) {
		for _, s := range specs {
			out = append(out, s.Name+"="+s.Shell)
		}
		return out
	}
	for _, tc := range []struct {
		what      string
		next      []jobs.Spec
		unchanged []bool
		upsert    []string
		remove    []string
	}{
		{"in place", []jobs.Spec{first[0], changed, first[2]}, nil, []string{"a=false"}, nil},
		{"reordered", []jobs.Spec{first[2], first[0], changed}, nil, []string{"a=false"}, nil},
		{"in place, marked", []jobs.Spec{first[0], changed, first[2]}, []bool{true, false, true}, []string{"a=false"}, nil},
		{"in place, the change marked unchanged", []jobs.Spec{first[0], changed, first[2]}, []bool{true, true, true}, nil, nil},
		{"reordered, the change marked unchanged", []jobs.Spec{first[2], first[0], changed}, []bool{true, true, true}, nil, nil},
		{"as it is", slices.Clone(first), nil, nil, nil},
		{"the change first, then the others reordered", []jobs.Spec{changed, first[0], first[2]}, nil, []string{"a=false"}, nil},
		{"new jobs first, then one kept", []jobs.Spec{jobstest.EveryMinute("d", "true"), jobstest.EveryMinute("e", "true"), first[0]}, nil, []string{"d=true", "e=true"}, []string{"a", "b"}},
		{"only new jobs", []jobs.Spec{jobstest.EveryMinute("d", "true"), jobstest.EveryMinute("e", "true")}, nil, []string{"d=true", "e=true"}, []string{"c", "a", "b"}},
		{"a new job marked unchanged is sent all the same", []jobs.Spec{first[0], first[1], first[2], jobstest.EveryMinute("d", "true")}, []bool{true, true, true, true}, []string{"d=true"}, nil},
		{"nothing left", []jobs.Spec{}, nil, nil, []string{"c", "a", "b"}},
	} {
		upsert, remove := Of(jobs.Addrs(first), at, tc.next, tc.unchanged)
		if !slices.Equal(names(upsert), tc.upsert) || !slices.Equal(remove, tc.remove) {
			t.Errorf("%s: upsert %v, remove %v; want upsert %v, remove %v", tc.what, names(upsert), remove, tc.upsert, tc.remove)
		}
	}
	// A first set is sent as it is, and an append to what Of returns
	// cannot write into next.
	next := []jobs.Spec{jobstest.EveryMinute("d", "true"), jobstest.EveryMinute("e", "true")}
	upsert, remove := Of(nil, nil, next[:2:2], nil)
	if !slices.Equal(names(upsert), []string{"d=true", "e=true"}) || remove != nil || cap(upsert) != len(upsert) {
		t.Errorf("a first set: upsert %v (cap %d), remove %v; want both jobs, nothing removed, no room to append", names(upsert), cap(upsert), remove)
	}
}

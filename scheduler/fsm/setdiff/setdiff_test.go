package setdiff

import (
	"slices"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// Of answers the same for a set edited in place (compared position by
// position) as for the same jobs in another order (compared by name), and
// for new jobs wherever they come.
func TestOf_InPlaceOrReordered(t *testing.T) {
	first := []jobs.Spec{everyMinute("c", "true"), everyMinute("a", "true"), everyMinute("b", "true")}
	at := map[string]int{"c": 0, "a": 1, "b": 2}
	changed := everyMinute("a", "false")
	names := func(specs []jobs.Spec) (out []string) {
		for _, s := range specs {
			out = append(out, s.Name)
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
		{"in place", []jobs.Spec{first[0], changed, first[2]}, nil, []string{"a"}, nil},
		{"reordered", []jobs.Spec{first[2], first[0], changed}, nil, []string{"a"}, nil},
		{"in place, marked", []jobs.Spec{first[0], changed, first[2]}, []bool{true, false, true}, []string{"a"}, nil},
		{"in place, the change marked unchanged", []jobs.Spec{first[0], changed, first[2]}, []bool{true, true, true}, nil, nil},
		{"reordered, the change marked unchanged", []jobs.Spec{first[2], first[0], changed}, []bool{true, true, true}, nil, nil},
		{"as it is", slices.Clone(first), nil, nil, nil},
		{"the change first, then the others reordered", []jobs.Spec{changed, first[0], first[2]}, nil, []string{"a"}, nil},
		{"new jobs first, then one kept", []jobs.Spec{everyMinute("d", "true"), everyMinute("e", "true"), first[0]}, nil, []string{"d", "e"}, []string{"a", "b"}},
		{"only new jobs", []jobs.Spec{everyMinute("d", "true"), everyMinute("e", "true")}, nil, []string{"d", "e"}, []string{"c", "a", "b"}},
	} {
		upsert, remove := Of(first, at, tc.next, tc.unchanged)
		if !slices.Equal(names(upsert), tc.upsert) || !slices.Equal(remove, tc.remove) {
			t.Errorf("%s: upsert %v, remove %v; want upsert %v, remove %v", tc.what, names(upsert), remove, tc.upsert, tc.remove)
		}
	}
}

// everyMinute is a normalized job that runs shell every minute.
func everyMinute(name, shell string) jobs.Spec {
	s := jobs.Spec{Name: name, Schedules: []string{"@every 1m"}, Shell: shell}
	s.Normalize()
	return s
}

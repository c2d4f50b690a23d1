// Package setdiff computes the difference between two job sets that
// replicates the second as changes to the first (scheduler/fsm/jobsdiff.go),
// in time linear in the sets with no map of the new set's names: the
// leader computes one for every apply, of sets of up to 200,000 jobs.
package setdiff

import (
	"reflect"
	"slices"

	"github.com/fencecron/fencecron/jobs"
)

// Of returns the difference that makes the set cur (each job's position
// by its name in at) into next: the jobs of next that are new or differ,
// and the names of those next lacks. A job unchanged marks (unchanged[i]
// for next[i]; nil marks none) that cur holds is taken as cur holds it,
// uncompared. next's names are each its own (the leader checked it).
// upsert may share next's array.
func Of(cur []*jobs.Spec, at map[string]int, next []jobs.Spec, unchanged []bool) (upsert []jobs.Spec, remove []string) {
	// kept[i]: next names cur's i-th job. A job is looked for at its own
	// position first (a set edited in place, the common case, where the
	// names of jobs kept share their bytes with cur's), then through at:
	// no map of next's names is built.
	kept := make([]bool, len(cur))
	// While every job so far is to be sent, upsert is next's first ones:
	// a set of new jobs (a first file) is not copied.
	prefix := true
	for k := range next {
		s := &next[k]
		i, had := k, k < len(cur) && cur[k].Name == s.Name
		if !had {
			i, had = at[s.Name]
		}
		if had {
			kept[i] = true
		}
		changed := !had || (unchanged == nil || !unchanged[k]) && !reflect.DeepEqual(cur[i], s)
		switch {
		case prefix && changed:
		case prefix:
			prefix = false
			upsert = append(make([]jobs.Spec, 0, max(k, len(next)-len(cur))), next[:k]...)
		case changed:
			upsert = append(upsert, *s)
		}
	}
	if prefix {
		upsert = slices.Clip(next)
	}
	for i, s := range cur {
		if !kept[i] {
			remove = append(remove, s.Name)
		}
	}
	return upsert, slices.Clip(remove)
}

// CopyKept points the jobs of specs that are cur's (n of them, each at
// its position in byName) at copies of them in one new array, in place:
// a set made by a large difference holds the jobs it keeps in an array of
// their own, not in the arrays of the sets before, each held alive for a
// few of its jobs.
func CopyKept(specs, cur []*jobs.Spec, byName map[string]int, n int) {
	kept := make([]jobs.Spec, 0, n)
	for i, s := range specs {
		if k, ok := byName[s.Name]; ok && cur[k] == s {
			kept = append(kept, *s)
			specs[i] = &kept[len(kept)-1]
		}
	}
}

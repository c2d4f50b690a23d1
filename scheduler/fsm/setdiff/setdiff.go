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
func Of(cur []jobs.Spec, at map[string]int, next []jobs.Spec, unchanged []bool) (upsert []jobs.Spec, remove []string) {
	if samePlaces(cur, next) {
		// The set edited in place, the common case: each job is compared
		// with the one at its position, and none is removed. Two maps of
		// 100,000 names cost more than the rest of the comparison.
		for k := range next {
			if (unchanged == nil || !unchanged[k]) && !reflect.DeepEqual(cur[k], next[k]) {
				upsert = append(upsert, next[k])
			}
		}
		return upsert, nil
	}
	// kept[i]: next names cur's i-th job, found through at rather than a
	// map of next's names.
	kept := make([]bool, len(cur))
	// While every job so far is to be sent, upsert is next's first ones:
	// a set of new jobs (a first file) is not copied.
	prefix := true
	for k, s := range next {
		i, had := at[s.Name]
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
			upsert = append(upsert, s)
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

// samePlaces reports whether next names the jobs of cur at the same
// positions. The names of a job kept share their bytes with cur's, which
// makes each comparison a pointer's.
func samePlaces(cur, next []jobs.Spec) bool {
	if len(cur) != len(next) || len(cur) == 0 {
		return false
	}
	for k := range cur {
		if cur[k].Name != next[k].Name {
			return false
		}
	}
	return true
}

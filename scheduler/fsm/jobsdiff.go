package fsm

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Job sets by difference (log version 8). A set of 100,000 jobs is about
// 32 MB of JSON; replacing it whole to change one job appended all of it
// to the log again (56 MiB more on each node's disk, measured), and every
// replica decoded and applied all of it. So the leader compares the set
// it is given with the replicated one and proposes only what differs (op
// set_jobs_diff): the jobs added or changed, whole, and the names of the
// jobs removed, in one entry of at most MaxJobsDiffBytes. A larger
// difference, or the first set, still travels whole (op set_jobs).
//
// A difference is decided in Apply (DecideJobsDiff), against the set it
// was computed from: the entry names that set's hash (Base), and a set
// replaced meanwhile (another apply, a restored snapshot) makes Apply
// refuse it (ErrJobsDiffBase) and change nothing; the leader then sends
// the set whole. The resulting set keeps the order of the one it changes,
// new jobs last; its hash (Hash) is the leader's, as for a whole set, and
// jobs.HashSpecs does not depend on the order.

// MaxJobsDiffBytes bounds the entry of a job set sent by difference; a
// larger difference is sent whole.
const MaxJobsDiffBytes = 60 << 10

// maxJobsDiffItems bounds the jobs a difference names, so that the
// leader does not build an entry it will not send.
const maxJobsDiffItems = 1024

// ErrJobsDiffBase refuses a difference computed against a job set that
// is no longer the replicated one: nothing changes.
var ErrJobsDiffBase = errors.New("the job set changed since the difference was computed")

// DecideJobsDiff returns the job set that difference d makes of cur (of
// hash curHash, each job's position in byName), or an error: d is
// against another set (ErrJobsDiffBase), removes a job the set does not
// have, or names a job twice. cur is not changed. It is pure, so every
// replica decides the same.
func DecideJobsDiff(cur []jobs.Spec, byName map[string]int, curHash string, d *replicated.SetJobsDiffCmd) ([]jobs.Spec, error) {
	if d.Base != curHash {
		return nil, fmt.Errorf("job set difference against %s, the set is %s: %w", d.Base, curHash, ErrJobsDiffBase)
	}
	named := make(map[string]bool, len(d.Upsert)+len(d.Remove))
	gone := make(map[int]bool, len(d.Remove))
	for _, name := range d.Remove {
		i, ok := byName[name]
		if !ok || named[name] {
			return nil, fmt.Errorf("job set difference removes %q: not in the set, or named twice: %w", name, jobs.ErrInvalidConfig)
		}
		named[name], gone[i] = true, true
	}
	replace := make(map[int]int, len(d.Upsert))
	var added []jobs.Spec
	for k, s := range d.Upsert {
		if named[s.Name] {
			return nil, fmt.Errorf("job set difference names %q twice: %w", s.Name, jobs.ErrInvalidConfig)
		}
		named[s.Name] = true
		if i, ok := byName[s.Name]; ok {
			replace[i] = k
		} else {
			added = append(added, s)
		}
	}
	// A new slice: a snapshot being written may hold the old one.
	out := make([]jobs.Spec, 0, len(cur)-len(gone)+len(added))
	for i, s := range cur {
		switch k, ok := replace[i]; {
		case gone[i]:
		case ok:
			out = append(out, d.Upsert[k])
		default:
			out = append(out, s)
		}
	}
	return append(out, added...), nil
}

// applySetJobsDiff changes the job set by difference, as DecideJobsDiff
// decides; a refused difference changes nothing.
func (f *FSM) applySetJobsDiff(l *raft.Log, d *replicated.SetJobsDiffCmd) ApplyResult {
	if !f.st.HasJobs {
		return ApplyResult{Err: fmt.Errorf("job set difference with no job set yet: %w", ErrJobsDiffBase)}
	}
	specs, err := DecideJobsDiff(f.st.Jobs, f.idx.byName, f.st.JobsHash, d)
	if err != nil {
		return ApplyResult{Err: err}
	}
	f.replaceJobs(l, specs, d.Source, d.At, d.Hash, fmt.Sprintf("%d jobs from %s (hash %s): %d added or changed, %d removed", len(specs), d.Source, d.Hash, len(d.Upsert), len(d.Remove)))
	return ApplyResult{}
}

// DiffJobs returns the difference that makes the replicated job set into
// next (normalized, as the leader checked it): the hash of the set it is
// against, the jobs of next that are new or differ, and the names of the
// jobs next does not have. ok is false when there is no set yet, or the
// difference names more jobs than one entry should carry: send next whole.
func (f *FSM) DiffJobs(next []jobs.Spec) (base string, upsert []jobs.Spec, remove []string, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.st.HasJobs {
		return "", nil, nil, false
	}
	seen := make(map[string]bool, len(next))
	for _, s := range next {
		seen[s.Name] = true
		i, had := f.idx.byName[s.Name]
		if had && reflect.DeepEqual(f.st.Jobs[i], s) {
			continue
		}
		if upsert = append(upsert, s); len(upsert) > maxJobsDiffItems {
			return "", nil, nil, false
		}
	}
	for _, s := range f.st.Jobs {
		if !seen[s.Name] {
			if remove = append(remove, s.Name); len(upsert)+len(remove) > maxJobsDiffItems {
				return "", nil, nil, false
			}
		}
	}
	return f.st.JobsHash, upsert, slices.Clip(remove), true
}

package fsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm/setdiff"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Job sets by difference (log version 8). Replacing a set of 100,000
// jobs (about 30 MB of JSON) whole to change one appended all of it to
// the log again, in one entry every follower decoded and applied whole.
// So the leader proposes only what differs from the replicated set (op
// set_jobs_diff): the jobs added or changed, whole, and the names of the
// jobs removed. A difference larger than MaxJobsDiffBytes travels in
// parts of at most that size (one larger job alone), kept in the
// replicated state as they arrive (State.JobsStage), in whatever order
// the leader's proposals reached the log; the set changes at once when
// the last is applied, so no grant ever sees half of a new set.
//
// A difference is decided in Apply (DecideJobsDiff), against the set it
// was computed from (its hash, Base): a set replaced meanwhile (another
// apply, a restored snapshot) makes Apply refuse it (ErrJobsDiffBase),
// and the leader computes it again. A part of another difference than
// the stage's (a leader that lost its term between parts) starts a new
// stage; a part the stage has is applied again as nothing (an apply
// retried after an error sends the same parts again). The set keeps the
// order of the one it changes, new jobs last; its hash (Hash) is the
// leader's, and jobs.HashSpecs does not depend on the order.

// MaxJobsDiffBytes bounds a job set difference's entry (its jobs counted
// by their JSON); a larger difference travels in parts.
const MaxJobsDiffBytes = 1 << 20

// WritesJobsDiff reports whether this binary replicates job sets by
// difference: a binary built to write an older log version (the upgrade
// tests build one) sends them whole, as that version did.
func WritesJobsDiff() bool { return replicated.LogVersion >= replicated.VersionJobsDiff }

// ErrJobsDiffBase refuses a difference computed against a job set that
// is no longer the replicated one: nothing changes.
var ErrJobsDiffBase = errors.New("the job set changed since the difference was computed")

// DecideJobsDiff returns the job set that a difference against the set
// of hash base makes of cur (of hash curHash, each job's position in
// byName): the jobs of upsert added or put in place of their namesakes,
// those named in remove left out. It fails if base is another set
// (ErrJobsDiffBase), or the difference removes a job the set does not
// have or names a job twice. cur is not changed. It is pure, so every
// replica decides the same.
func DecideJobsDiff(cur []*jobs.Spec, byName map[string]int, curHash, base string, upsert []*jobs.Spec, remove []string) ([]*jobs.Spec, error) {
	if base != curHash {
		return nil, fmt.Errorf("job set difference against %s, the set is %s: %w", base, curHash, ErrJobsDiffBase)
	}
	named := make(map[string]bool, len(upsert)+len(remove))
	gone := make(map[int]bool, len(remove))
	for _, name := range remove {
		i, ok := byName[name]
		if !ok || named[name] {
			return nil, fmt.Errorf("job set difference removes %q: not in the set, or named twice: %w", name, jobs.ErrInvalidConfig)
		}
		named[name], gone[i] = true, true
	}
	replace := make(map[int]int, len(upsert))
	for k, s := range upsert {
		if named[s.Name] {
			return nil, fmt.Errorf("job set difference names %q twice: %w", s.Name, jobs.ErrInvalidConfig)
		}
		named[s.Name] = true
		if i, ok := byName[s.Name]; ok {
			replace[i] = k
		}
	}
	// A new slice (a snapshot may hold the old one): the set, then the
	// jobs added. The jobs kept are shared, not copied (800 KB of
	// addresses for 100,000, not 38 MB of specs).
	out := make([]*jobs.Spec, 0, len(cur)-len(gone)+len(upsert)-len(replace))
	changed := slices.AppendSeq(slices.Collect(maps.Keys(gone)), maps.Keys(replace))
	slices.Sort(changed)
	from := 0
	for _, i := range changed {
		out = append(out, cur[from:i]...)
		if k, ok := replace[i]; ok {
			out = append(out, upsert[k])
		}
		from = i + 1
	}
	out = append(out, cur[from:]...)
	for _, s := range upsert {
		if _, ok := byName[s.Name]; !ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// applySetJobsDiff changes the job set by difference, as DecideJobsDiff
// decides, once its last part is applied; a refused entry changes
// nothing.
func (f *FSM) applySetJobsDiff(l *raft.Log, d *replicated.SetJobsDiffCmd) ApplyResult {
	parts := max(d.Parts, 1)
	if d.Part < 0 || d.Part >= parts {
		return ApplyResult{Err: fmt.Errorf("job set difference part %d of %d: %w", d.Part, parts, jobs.ErrInvalidConfig)}
	}
	upsert, remove := jobs.Addrs(d.Upsert), d.Remove
	if parts > 1 {
		if d.Base != f.st.JobsHash {
			return ApplyResult{Err: fmt.Errorf("job set difference against %s, the set is %s: %w", d.Base, f.st.JobsHash, ErrJobsDiffBase)}
		}
		st := f.st.JobsStage
		switch {
		case st == nil || st.Base != d.Base || st.Hash != d.Hash || st.Parts != parts || len(st.Got) != parts:
			st = &replicated.JobsStage{Base: d.Base, Hash: d.Hash, Parts: parts, Got: make([]bool, parts)}
		case st.Got[d.Part]:
			return ApplyResult{}
		default:
			// A new stage value (a snapshot may hold the old one), whose
			// lists grow in place past the old one's lengths: copied per
			// part, they cost the square of the set's size.
			c := *st
			c.Got = slices.Clone(st.Got)
			st = &c
		}
		st.Upsert, st.Remove = append(st.Upsert, upsert...), append(st.Remove, remove...)
		st.Got[d.Part] = true
		if slices.Contains(st.Got, false) {
			f.st.JobsStage = st
			return ApplyResult{}
		}
		// The last part ends the stage, applied or refused.
		f.st.JobsStage = nil
		upsert, remove = st.Upsert, st.Remove
	}
	specs, err := DecideJobsDiff(f.st.Jobs, f.idx.byName, f.st.JobsHash, d.Base, upsert, remove)
	if err != nil {
		return ApplyResult{Err: err}
	}
	// Every job of the arrays decoded for this difference is in the new
	// set; the arrays of the sets before may hold few (setdiff.CopyKept).
	if 8*len(upsert) >= len(specs) && len(upsert) < len(specs) {
		setdiff.CopyKept(specs, f.st.Jobs, f.idx.byName, len(specs)-len(upsert))
	}
	// Nothing removed, as many jobs: each upsert changed a job in place.
	f.replaceJobs(l, specs, upsert, len(remove) == 0 && len(specs) == len(f.st.Jobs), d.Source, d.At, d.Hash, fmt.Sprintf("%d jobs from %s (hash %s): %d added or changed, %d removed", len(specs), d.Source, d.Hash, len(upsert), len(remove)))
	return ApplyResult{}
}

// JobSetBase is the replicated job set (Hash "" before the first) as one
// read saw it: what a difference is computed against and, for an apply
// limited to some namespaces, what it keeps of the others. Apply refuses
// the difference if the set changed since (its Base is this Hash).
type JobSetBase struct {
	Jobs   []*jobs.Spec
	Hash   string
	Sorted []int          // the positions in Jobs in name order (shared: read only)
	ByName map[string]int // each job's position in Jobs (shared: read only)
}

// JobSetBase returns the replicated job set as it is now: the set and
// its index are replaced whole, never changed in place.
func (f *FSM) JobSetBase() JobSetBase {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return JobSetBase{Jobs: f.st.Jobs, Hash: f.st.JobsHash, Sorted: f.idx.sorted, ByName: f.idx.byName}
}

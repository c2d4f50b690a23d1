package scheduler

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// JobChanges is a job set given as what changed since the replicated set
// of hash Base: the specs of the jobs added or changed, and the names of
// the jobs removed (PUT /api/v1/jobset/changes).
type JobChanges struct {
	Base   string
	Upsert []jobs.Spec
	Remove []string
}

// ErrChangesNeedSet is why SetJobsChanges applied nothing, for a caller
// that then builds the set the changes make and applies it whole
// (SetJobsKnown): the leader is of an older version, it did not itself
// check the set they change, or a job of the
// set or of the changes runs after others or is of a group (checked
// against the set's other jobs).
var ErrChangesNeedSet = errors.New("the changes are to be applied as the set they make")

// SetJobsChanges applies ch on the leader that checked the set they
// change, forwarded there if this node does not lead: the specs sent are
// checked, the others are that set's, and the set they make is never
// copied whole on the way (a one-job change of 100,000 otherwise copies
// and checks the 100,000, and a follower forwards the 32 MB they make).
// It returns the new set's hash and size. It refuses with
// fsm.ErrJobsDiffBase if the replicated set is not ch.Base, and with
// ErrChangesNeedSet where the changes are to be applied as a set; either
// way nothing changed.
func (s *Scheduler) SetJobsChanges(ctx context.Context, ch JobChanges, source string) (hash string, n int, err error) {
	return s.toLeader().SetJobsChanges(ctx, ch, source)
}

// SetJobsChanges is Scheduler.SetJobsChanges on the leader.
func (l local) SetJobsChanges(ctx context.Context, ch JobChanges, source string) (string, int, error) {
	if !fsm.WritesJobsDiff() {
		return "", 0, ErrChangesNeedSet
	}
	if err := l.leads("set jobs"); err != nil {
		return "", 0, err
	}
	l.s.setJobs.Lock()
	defer l.s.setJobs.Unlock()
	limits := l.s.JobLimits()
	cur := l.s.FSM.JobSetBase()
	if cur.Hash != ch.Base {
		return "", 0, fmt.Errorf("job set changes against %s, the set is %s: %w", ch.Base, cur.Hash, fsm.ErrJobsDiffBase)
	}
	if l.s.checked != (checkedSet{cur.Hash, limits}) || related(cur.Jobs) || related(jobs.Addrs(ch.Upsert)) {
		return "", 0, ErrChangesNeedSet
	}
	upsert, err := replicated.CheckJobSet(ch.Upsert, limits, nil)
	if err != nil {
		return "", 0, err
	}
	// Where each job of the new set is: replaced[i] is the index in
	// upsert of cur's i-th job's new spec (-1: kept, -2: removed).
	replaced := make([]int32, len(cur.Jobs))
	for i := range replaced {
		replaced[i] = -1
	}
	removed := make(map[string]bool, len(ch.Remove))
	for _, name := range ch.Remove {
		i, ok := cur.ByName[name]
		if !ok || removed[name] {
			return "", 0, invalid("the changes remove job %s: the set does not hold it, or it is named twice", name)
		}
		removed[name], replaced[i] = true, -2
	}
	var added []int // indexes in upsert of the jobs new to the set
	var changed []jobs.Spec
	for k := range upsert {
		s := &upsert[k]
		i, ok := cur.ByName[s.Name]
		switch {
		case removed[s.Name]:
			return "", 0, invalid("the changes remove job %s and send it", s.Name)
		case !ok:
			added = append(added, k)
			changed = append(changed, *s)
		default:
			replaced[i] = int32(k)
			if !reflect.DeepEqual(cur.Jobs[i], s) {
				changed = append(changed, *s)
			}
		}
	}
	// The new set: cur's jobs in their order, each kept or replaced, the
	// removed left out, then the jobs added (as DecideJobsDiff makes it).
	at := make([]*jobs.Spec, 0, len(cur.Jobs)-len(ch.Remove)+len(added))
	for i, k := range replaced {
		switch {
		case k == -1:
			at = append(at, cur.Jobs[i])
		case k >= 0:
			at = append(at, &upsert[k])
		}
	}
	for _, k := range added {
		at = append(at, &upsert[k])
	}
	if len(at) > jobs.MaxJobs {
		return "", 0, invalid("%d jobs: a job set holds at most %d", len(at), jobs.MaxJobs)
	}
	// Jobs changed in place keep the set's order of names.
	order := cur.Sorted
	if len(ch.Remove) > 0 || len(added) > 0 {
		order = jobs.NameOrder(len(at), func(i int) *jobs.Spec { return at[i] })
	}
	was := func(k int) *jobs.Spec { return cur.Jobs[cur.Sorted[k]] }
	hash := l.s.hasher.hash(len(at), func(k int) *jobs.Spec { return at[order[k]] }, cur.Hash, was)
	if len(source) > maxSourceLen {
		source = replicated.Clip(source, maxSourceLen)
	}
	if err := l.proposeDiff(ctx, jobsDiffParts(cur.Hash, changed, ch.Remove, hash, source, l.s.now())); err != nil {
		l.s.checked = checkedSet{} // some parts may have applied
		return "", 0, err
	}
	l.s.checked = checkedSet{hash, limits}
	return hash, len(at), nil
}

// related reports whether a job of specs is checked against others of
// its set: one that runs after others, or one of a group with limits.
func related(specs []*jobs.Spec) bool {
	for i := range specs {
		if len(specs[i].After) > 0 || specs[i].Group != "" {
			return true
		}
	}
	return false
}

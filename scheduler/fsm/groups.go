package fsm

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Concurrency groups (log version 4). A job may name a group (jobs.Spec
// Group, with the group's limits copied into the spec from the config's
// top-level groups). A run of a group's job holds a place in the group
// from its grant until the run finishes, its retries included (so a
// retry never queues behind a newer fire time, and never two attempts of
// one run hold two places). At most max_running runs hold a place at
// once; the others wait in the replicated state, pending with no attempt
// and the reason "waiting for group NAME", in fire-time order; beyond
// max_waiting a fire time is skipped.
//
// Everything is decided inside FSM.Apply, by DecideAdmission and
// PromoteWaiters, from the replicated state alone:
//
//   - a grant of a group's job whose group is full, or has waiters
//     already, records the run as waiting instead of minting a token (or
//     skipped, if the queue is full);
//   - after every entry that leaves a place free (an attempt ended, a run
//     finished, a waiter was cancelled, the limits changed), the same
//     entry admits the oldest waiters: each now holds a place, pending
//     with no attempt yet;
//   - the leader grants an admitted run's first attempt (op "admit", a
//     worker it chooses, a token minted from that entry) and dispatches
//     it like any grant. A new leader finds admitted runs in the state
//     and grants them; a waiter is never forgotten (it is in the state)
//     and never doubled (a run's first attempt is granted once: "admit"
//     refuses a run that has one).

// Admission is what DecideAdmission says of a grant of a group's job.
type Admission int

// Admissions.
const (
	// Admit: the run takes a place now and its first attempt is granted.
	Admit Admission = iota
	// Wait: the run waits for a place.
	Wait
	// Full: the group's queue is full: the fire time is skipped.
	Full
)

// GroupLoad is a group's load in the replicated state: the runs holding a
// place, and those waiting.
type GroupLoad struct {
	Holding int
	Waiting int
}

// DecideAdmission decides a grant of a run of a group's job: a place if
// one is free and nobody waits (waiters go first: fire-time order), else
// a place in the queue while it has room (max_waiting), else none. It is
// pure, so every replica decides the same.
func DecideAdmission(g jobs.Group, load GroupLoad) Admission {
	switch {
	case load.Holding < g.MaxRunning && load.Waiting == 0:
		return Admit
	case load.Waiting < g.MaxWaiting:
		return Wait
	}
	return Full
}

// PromoteWaiters returns how many of a group's waiters (oldest first) take
// the places free: max_running minus the runs holding one, at most the
// waiters there are. It is pure.
func PromoteWaiters(g jobs.Group, load GroupLoad) int {
	return max(0, min(g.MaxRunning-load.Holding, load.Waiting))
}

// groupLimits returns the limits of the groups the job set defines.
func (f *FSM) groupLimits() map[string]jobs.Group {
	if f.groupsOf != f.st.JobsHash || f.groups == nil {
		f.groups = map[string]jobs.Group{}
		for _, g := range jobs.Groups(f.st.Jobs) {
			f.groups[g.Name] = g
		}
		f.groupsOf = f.st.JobsHash
	}
	return f.groups
}

// groupLoad counts the runs of group g holding a place and waiting.
func (f *FSM) groupLoad(g string) GroupLoad {
	load := GroupLoad{Waiting: len(f.st.GroupQueue[g])}
	for _, id := range f.st.Order {
		r := f.st.Runs[id]
		if r.Group == g && !r.State.Terminal() && !jobs.IsWaiting(*r) {
			load.Holding++
		}
	}
	return load
}

// admit decides the grant of run r of a group's job (applyGrant calls it
// for a grant it would otherwise grant, in an entry of version 4 or
// later): Admit leaves r to be granted; Wait records it as waiting; Full
// records it as skipped.
func (f *FSM) admit(l *raft.Log, r *jobs.Run, g jobs.Group, at time.Time) Admission {
	r.Group = g.Name
	load := f.groupLoad(g.Name)
	switch d := DecideAdmission(g, load); d {
	case Wait:
		r.State, r.Reason = jobs.Pending, jobs.WaitingReason(g.Name)
		q := append(f.st.GroupQueue[g.Name], replicated.GroupWaiter{Run: r.ID, ScheduledAt: r.ScheduledAt, Since: at})
		slices.SortStableFunc(q, func(a, b replicated.GroupWaiter) int {
			return cmp.Or(a.ScheduledAt.Compare(b.ScheduledAt), cmp.Compare(a.Run, b.Run))
		})
		f.st.GroupQueue[g.Name] = q
		f.event(l, jobs.Event{Time: at, Kind: jobs.EventWaiting, Job: r.Job, Run: r.ID,
			Detail: fmt.Sprintf("%s: %d of %d places held, %d waiting before it", r.Reason, load.Holding, g.MaxRunning, load.Waiting)})
		return d
	case Full:
		r.State = jobs.Skipped
		r.Reason = fmt.Sprintf("%s: its queue is full (%d waiting, max_waiting %d)", jobs.WaitingReason(g.Name), load.Waiting, g.MaxWaiting)
		f.st.Counters[CounterSkipped]++
		f.st.Counters[CounterGroupFull]++
		f.event(l, jobs.Event{Time: at, Kind: jobs.EventSkipped, Job: r.Job, Run: r.ID, Detail: r.Reason})
		return d
	}
	return Admit
}

// CounterGroupFull counts fire times skipped because their group's queue
// was full.
const CounterGroupFull = "group_full"

// promoteWaiters admits, in every group with waiters, the oldest ones
// while places are free: each is recorded admitted (pending, no attempt
// yet) and the leader is told (ChangeAdmitted). A waiter whose job left
// the set is cancelled; one whose group is no longer defined is admitted
// (nothing limits it any more). Apply calls it after every entry of
// version 4 or later while any run waits.
func (f *FSM) promoteWaiters(l *raft.Log, at time.Time) {
	limits := f.groupLimits()
	for _, name := range slices.Sorted(mapKeys(f.st.GroupQueue)) {
		q := f.st.GroupQueue[name]
		n := len(q)
		if g, ok := limits[name]; ok {
			n = PromoteWaiters(g, f.groupLoad(name))
		}
		for i := 0; i < n && len(q) > 0; i++ {
			w := q[0]
			q = q[1:]
			r, ok := f.st.Runs[w.Run]
			if !ok || !jobs.IsWaiting(*r) {
				i-- // gone already: it held no place
				continue
			}
			if _, known := f.spec(r.Job); !known {
				i--
				r.State, r.Reason = jobs.Cancelled, "its job left the job set while it waited for group "+name
				f.event(l, jobs.Event{Time: at, Kind: jobs.EventCancelled, Job: r.Job, Run: r.ID, Detail: r.Reason})
				f.changed(l, Change{Kind: ChangeEnded, Run: r.ID})
				continue
			}
			r.Reason = fmt.Sprintf("admitted to group %s after waiting %s", name, at.Sub(w.Since).Round(time.Millisecond))
			f.event(l, jobs.Event{Time: at, Kind: jobs.EventAdmitted, Job: r.Job, Run: r.ID, Detail: r.Reason})
			f.changed(l, Change{Kind: ChangeAdmitted, Run: r.ID})
		}
		if len(q) == 0 {
			delete(f.st.GroupQueue, name)
		} else {
			f.st.GroupQueue[name] = q
		}
	}
}

func mapKeys[V any](m map[string]V) iter.Seq[string] { return maps.Keys(m) }

// cancelUnstarted ends cancelled (overlap: replace) a run of a group
// that has no attempt: waiting (it leaves its group's queue) or admitted.
func (f *FSM) cancelUnstarted(l *raft.Log, r *jobs.Run, reason string, at time.Time) {
	waiting := jobs.IsWaiting(*r)
	if !waiting && !IsAdmitted(*r) {
		return
	}
	if waiting {
		q := slices.DeleteFunc(slices.Clone(f.st.GroupQueue[r.Group]), func(w replicated.GroupWaiter) bool { return w.Run == r.ID })
		if len(q) == 0 {
			delete(f.st.GroupQueue, r.Group)
		} else {
			f.st.GroupQueue[r.Group] = q
		}
	}
	r.State, r.Reason = jobs.Cancelled, reason
	f.event(l, jobs.Event{Time: at, Kind: jobs.EventCancelled, Job: r.Job, Run: r.ID, Detail: "before its first attempt (group " + r.Group + "): " + reason})
	f.changed(l, Change{Kind: ChangeEnded, Run: r.ID})
}

// IsAdmitted reports whether a run holds a place in its group and waits
// for the leader to grant its first attempt (OpAdmit).
func IsAdmitted(r jobs.Run) bool {
	return r.State == jobs.Pending && len(r.Attempts) == 0 && r.Group != "" && !jobs.IsWaiting(r)
}

// applyAdmit grants an admitted run's first attempt, minting its token
// from this entry. A run that is not admitted (waiting, granted already,
// finished) is refused with ErrStaleAttempt and nothing changes.
func (f *FSM) applyAdmit(l *raft.Log, c *replicated.AdmitCmd) ApplyResult {
	r, ok := f.st.Runs[c.Run]
	if !ok {
		return ApplyResult{Err: fmt.Errorf("admit %s: %w", c.Run, jobs.ErrNotFound)}
	}
	if !IsAdmitted(*r) {
		return ApplyResult{Run: r.Clone(), Err: fmt.Errorf("admit %s: the run is %s with %d attempts, not admitted: %w", c.Run, r.State, len(r.Attempts), jobs.ErrStaleAttempt)}
	}
	if _, known := f.spec(r.Job); !known {
		// Its job left the set after it was admitted: it ends, and its
		// place goes to the next waiter (Apply promotes after this).
		r.State, r.Reason = jobs.Cancelled, "its job left the job set before its first attempt"
		f.event(l, jobs.Event{Time: c.At, Kind: jobs.EventCancelled, Job: r.Job, Run: r.ID, Detail: r.Reason})
		f.changed(l, Change{Kind: ChangeEnded, Run: r.ID})
		return ApplyResult{Run: r.Clone()}
	}
	if err := f.newAttempt(l, r, c.Worker, c.At); err != nil {
		return ApplyResult{Run: r.Clone(), Err: fmt.Errorf("admit %s: %w", c.Run, err)}
	}
	return ApplyResult{Run: r.Clone()}
}

// GroupStatus is one group's state for the API, the dashboard and the
// metrics: its limits, the runs holding a place, and the waiters in
// order with how long each has waited.
type GroupStatus struct {
	jobs.Group
	Holding []jobs.Run               `json:"holding"`
	Waiting []replicated.GroupWaiter `json:"waiting"`
	// Defined is false for a group that still has runs but is no longer
	// in the job set.
	Defined bool `json:"defined"`
}

// Groups returns every group the job set defines or that has runs
// holding or waiting, by name.
func (f *FSM) Groups() []GroupStatus {
	f.mu.Lock() // groupLimits may rebuild its cache
	defer f.mu.Unlock()
	by := map[string]*GroupStatus{}
	get := func(name string) *GroupStatus {
		g, ok := by[name]
		if !ok {
			g = &GroupStatus{Group: jobs.Group{Name: name}}
			by[name] = g
		}
		return g
	}
	for name, lim := range f.groupLimits() {
		g := get(name)
		g.Group, g.Defined = lim, true
	}
	for _, id := range f.st.Order {
		r := f.st.Runs[id]
		if r.Group != "" && !r.State.Terminal() && !jobs.IsWaiting(*r) {
			g := get(r.Group)
			g.Holding = append(g.Holding, r.Clone())
		}
	}
	for name, q := range f.st.GroupQueue {
		get(name).Waiting = slices.Clone(q)
	}
	out := make([]GroupStatus, 0, len(by))
	for _, name := range slices.Sorted(mapKeys(by)) {
		out = append(out, *by[name])
	}
	return out
}

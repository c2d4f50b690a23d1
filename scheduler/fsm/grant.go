package fsm

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func (f *FSM) noteScheduled(job string, at time.Time) {
	if at.After(f.st.LastScheduled[job]) {
		f.st.LastScheduled[job] = at
	}
}

func (f *FSM) applyGrant(l *raft.Log, version int, op string, g *replicated.GrantCmd) ApplyResult {
	spec, known := f.spec(g.Job)
	id := jobs.RunID(g.Job, g.ScheduledAt)
	if g.Trigger == TriggerBackfill && version >= replicated.VersionBackfill && known {
		if err := f.admitBackfill(op, g, spec); err != nil {
			return ApplyResult{Err: err}
		}
	}
	in := GrantInput{
		Job: g.Job, ScheduledAt: g.ScheduledAt, Trigger: g.Trigger, Force: g.Force, Version: version,
		Known: known, Overlap: spec.Overlap, Horizon: f.st.Horizon[g.Job], Existing: f.st.Runs[id],
	}
	if op == replicated.OpSkip {
		in.Skip = g.Reason
		if in.Skip == "" {
			in.Skip = "skipped by the leader"
		}
	}
	if version >= replicated.VersionDecideInApply {
		in.Open = f.openRuns(g.Job)
	}
	d := DecideGrant(in)
	if d.Verdict == GrantRefused {
		res := ApplyResult{Err: d.Err}
		if in.Existing != nil {
			res.Run = in.Existing.Clone()
		}
		return res
	}
	if g.Ahead && version >= replicated.VersionAhead {
		if err := DecideAhead(in); err != nil {
			return ApplyResult{Err: err}
		}
	}
	r := &jobs.Run{ID: id, Job: g.Job, ScheduledAt: g.ScheduledAt, Output: g.Output, Trigger: g.Trigger}
	if d.Verdict == GrantSkipped {
		if op == replicated.OpSkip {
			d.Reason = g.Reason // as written, even empty
		}
		r.State, r.Reason = jobs.Skipped, d.Reason
		f.st.Counters[CounterSkipped]++
		f.runFinished(jobs.Pending, r)
		f.event(l, jobs.Event{Time: g.At, Kind: jobs.EventSkipped, Job: g.Job, Run: id, Detail: d.Reason})
		f.changed(l, Change{Kind: ChangeEnded, Run: id}) // its followers are skipped too
	} else {
		// A grant whose token would be out of range grants nothing and
		// cancels nothing.
		if err := f.tokenInRange(l); err == nil {
			for _, old := range d.Replace {
				f.cancel(l, f.st.Runs[old], fmt.Sprintf("replaced by the run for %s (overlap: replace)", g.ScheduledAt.UTC().Format(time.RFC3339)), g.At)
			}
		}
		r.State = jobs.Pending
		// A group's job takes a place in its group, or waits, or is
		// skipped if the queue is full (groups.go).
		if version < replicated.VersionGroups || spec.GroupLimits == nil || f.admit(l, r, *spec.GroupLimits, g.At) == Admit {
			if err := f.newAttempt(l, r, g.Worker, g.At); err != nil {
				return ApplyResult{Err: fmt.Errorf("grant %s: %w", id, err)} // the run is not recorded
			}
			if a, ok := r.Latest(); ok && g.Ahead && version >= replicated.VersionStartsInLog {
				a.StartInLog = true // prestart.go
			}
		}
		if g.Force && version >= replicated.VersionDecideInApply && r.State != jobs.Skipped { // skipped: its group's queue was full
			r.Forced = true
			detail := fmt.Sprintf("trigger -force: %s granted whatever overlap: %s says", id, spec.Overlap)
			if len(d.Overrode) > 0 {
				detail += fmt.Sprintf("; it runs beside %s", strings.Join(d.Overrode, ", "))
			}
			f.event(l, jobs.Event{Time: g.At, Kind: jobs.EventForced, Job: g.Job, Run: id, Detail: detail})
		}
	}
	f.recordRun(r)
	return ApplyResult{Run: r.Clone()}
}

// openRuns returns the job's runs that have not finished, oldest first.
// It looks at the job's own runs only (jobIndex).
func (f *FSM) openRuns(job string) []jobs.Run {
	var out []jobs.Run
	for _, id := range f.idx.runs[job] {
		if r := f.st.Runs[id]; !r.State.Terminal() {
			out = append(out, *r)
		}
	}
	return out
}

// cancel ends an open run for reason: its open attempt is cancelled (the
// worker learns it at its next renewal), or, if it waits for a retry, it
// gets none.
func (f *FSM) cancel(l *raft.Log, r *jobs.Run, reason string, at time.Time) {
	a, ok := r.Latest()
	switch {
	case !ok:
		f.cancelUnstarted(l, r, reason, at) // waiting for its group, or admitted
		return
	case AwaitsRetry(*r):
		r.NoRetry = true
		f.settle(r)
		f.event(l, jobs.Event{Time: at, Kind: jobs.EventCancelled, Job: r.Job, Run: r.ID, Detail: "no retry: " + reason})
	case !a.State.Terminal():
		a.State, a.Error, a.EndedAt, a.Expired = jobs.Cancelled, reason, at, true
		f.settle(r)
		f.event(l, jobs.Event{Time: at, Kind: jobs.EventCancelled, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: reason})
	default:
		return
	}
	f.ended(l, r, a)
}

// epochOf is the epoch of the leader that wrote l: its Raft term, plus the
// epoch base of a restored cluster (state.EpochBase).
func (f *FSM) epochOf(l *raft.Log) uint64 { return l.Term + f.st.EpochBase }

func (f *FSM) tokenInRange(l *raft.Log) error {
	if l.Term > math.MaxInt64 || f.st.EpochBase > math.MaxInt64 {
		return fmt.Errorf("epoch of term %d and base %d is out of range", l.Term, f.st.EpochBase)
	}
	return (fencedstore.Token{Epoch: f.epochOf(l), Seq: l.Index}).Validate()
}

// newAttempt grants the run's next attempt, minting its token from this
// very log entry. It refuses (ErrTokenRange, and an event) when the
// entry's term or index is outside the range a token may take
// (fencedstore.Token): a token no store accepts must never be handed out,
// and such a term can only come from a peer that moved it on purpose.
func (f *FSM) newAttempt(l *raft.Log, r *jobs.Run, worker string, at time.Time) error {
	if err := f.tokenInRange(l); err != nil {
		f.st.Counters[CounterGrantsRefused]++
		err = fmt.Errorf("%w: Raft term %d and index %d cannot make a fence token (epoch and seq must be 1 to %d; every store would refuse it): %v",
			jobs.ErrTokenRange, l.Term, l.Index, int64(math.MaxInt64), err)
		if f.st.RangeRefusedTerm != l.Term {
			f.st.RangeRefusedTerm = l.Term
			f.event(l, jobs.Event{Time: at, Kind: jobs.EventGrantRefused, Node: worker, Job: r.Job, Run: r.ID, Epoch: f.epochOf(l),
				Detail: fmt.Sprintf("attempt %d not granted: %v; every grant in this term is refused (recorded once per term)", len(r.Attempts)+1, err)})
		}
		return err
	}
	n := len(r.Attempts) + 1
	a := jobs.Attempt{
		ID: jobs.AttemptID(r.ID, n), Number: n,
		Token:  jobs.Fence{Epoch: f.epochOf(l), Seq: l.Index},
		Worker: worker, State: jobs.Pending, GrantedAt: at,
	}
	r.Attempts = append(r.Attempts, a)
	r.State = jobs.Pending
	f.st.Counters[CounterGrants]++
	tok := a.Token // the event's own: &a.Token put all of a on the heap
	f.event(l, jobs.Event{Time: at, Kind: jobs.EventGranted, Node: worker, Job: r.Job, Run: r.ID, Attempt: a.ID,
		Token: &tok, Detail: fmt.Sprintf("attempt %d to %s with token %s", n, worker, a.Token)})
	return nil
}

func (f *FSM) applySkipRange(l *raft.Log, c *replicated.SkipRangeCmd) ApplyResult {
	f.st.Skips = append(f.st.Skips, c.SkipRange)
	if over := len(f.st.Skips) - replicated.MaxSkipRanges; over > 0 {
		f.st.Skips = slices.Delete(f.st.Skips, 0, over)
	}
	f.noteScheduled(c.Job, c.To)
	f.st.Counters[CounterSkipped] += uint64(c.Count)
	f.firesSkipped(c.Job, c.Count)
	f.overload.Note(c.SkipRange, c.At)
	f.event(l, jobs.Event{Time: c.At, Kind: jobs.EventSkipped, Job: c.Job,
		Detail: fmt.Sprintf("%d fire times from %s to %s: %s", c.Count, c.From.Format(time.RFC3339), c.To.Format(time.RFC3339), c.Reason)})
	return ApplyResult{}
}

// recordRun adds a run just decided to the state, and trims the state.
func (f *FSM) recordRun(r *jobs.Run) {
	f.st.Runs[r.ID] = r
	f.st.Order = append(f.st.Order, r.ID)
	f.addRun(r)
	f.noteScheduled(r.Job, r.ScheduledAt)
	f.trim()
}

// trim drops the oldest finished runs beyond MaxRuns, moving each job's
// horizon forward so a dropped (job, scheduled time) stays ungrantable.
func (f *FSM) trim() {
	limit := f.MaxRuns
	if limit <= 0 {
		limit = replicated.DefaultMaxRuns
	}
	drop := 0
	for len(f.st.Order)-drop > limit {
		r := f.st.Runs[f.st.Order[drop]]
		if !r.State.Terminal() {
			break
		}
		if r.ScheduledAt.After(f.st.Horizon[r.Job]) {
			f.st.Horizon[r.Job] = r.ScheduledAt
		}
		if f.History != nil {
			// No clone: once dropped, nothing in the state reaches r, so
			// nothing changes it while the history writes it out.
			f.trimmedRuns = append(f.trimmedRuns, *r)
		}
		f.dropRun(r)
		delete(f.st.Runs, r.ID)
		drop++
	}
	f.st.Order = f.st.Order[drop:]
}

package fsm

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Dependencies (jobs.Spec.After, log version 4). A job with after has no
// schedule: its run for scheduled time S is decided in the very entry
// that finishes the last of its parents' runs for S, so its token (that
// entry's index) is newer than every parent's, and no leader can grant it
// twice or forget it. The leader that proposes a completion names, in the
// same entry, a worker for each job that may follow (FollowCmd): the FSM
// cannot see gossip, and a grant must name its worker.

// TriggerAfter is the trigger of a run granted because its parents'
// runs succeeded.
const TriggerAfter = "after"

// MaxFollowErr bounds the reason a follower's key did not render, kept as
// its skip's reason on every server.
const MaxFollowErr = 512

// followKey is the output key of job spec's run id for t, as the entry
// decides it: a version 7 entry takes the key its leader rendered
// (checked by the store's key rule) and skips the run if there is none. An
// older one renders the template here with the rules of the servers that
// wrote it (the whole language, unbounded): a server that rendered it
// with today's narrower rules could decide otherwise than they did, and
// the replicas of a cluster being upgraded would diverge.
func followKey(version int, follow *replicated.FollowCmd, spec jobs.Spec, id string, t time.Time) (string, error) {
	if spec.Output == "" {
		return "", nil
	}
	if version < replicated.VersionLeaderRendersKeys {
		return spec.OutputKeyBeforeV7(t)
	}
	o, ok := follow.Outputs[id]
	switch {
	case !ok:
		return "", errors.New("the leader proposed no output key for it")
	case o.Err != "":
		return "", errors.New(replicated.Clip(o.Err, MaxFollowErr))
	}
	if err := fencedstore.CheckKey(o.Key); err != nil {
		return "", fmt.Errorf("its output key is not a store key: %v", err)
	}
	return o.Key, nil
}

// FollowVerdict is what DecideFollow decided for a dependent run.
type FollowVerdict int

// Follow verdicts.
const (
	// FollowNone: nothing to do (already decided, or out of the
	// retained history).
	FollowNone FollowVerdict = iota
	// FollowWait: a parent's run has not finished (or not started).
	FollowWait
	// FollowGrant: every parent's run succeeded; grant the run.
	FollowGrant
	// FollowSkip: a parent's run did not succeed (or the job cannot run):
	// record the run as skipped with Reason.
	FollowSkip
)

// FollowInput is what DecideFollow looks at for the run of Job for
// ScheduledAt.
type FollowInput struct {
	Job         string
	ScheduledAt time.Time
	// After is the job's after list; Parents holds each parent's run for
	// ScheduledAt, if there is one.
	After   []string
	Parents map[string]*jobs.Run
	// Existing is the job's run for ScheduledAt, if any; Horizon its
	// retained horizon.
	Existing *jobs.Run
	Horizon  time.Time
	Paused   bool
	// Worker is the worker the leader chose ("" if none matched, or the
	// entry named none).
	Worker string
	// OutputErr is why the job's output key does not render, if it
	// does not.
	OutputErr error
}

// FollowDecision is DecideFollow's answer: the verdict, the reason of a
// skip, and the parents' run ids it followed (or the one that skipped it).
type FollowDecision struct {
	Verdict FollowVerdict
	Reason  string
	Parents []string
}

// DecideFollow decides the run of a job with after for one scheduled
// time, from its parents' runs for that time. A parent's run that ended
// in any state but succeeded (failed after its retries, timed out, lost,
// fenced, cancelled, skipped) skips it, naming that parent; when all
// succeeded it is granted (unless paused, or no worker was chosen: then
// skipped, saying so); otherwise it waits.
func DecideFollow(in FollowInput) FollowDecision {
	if in.Existing != nil || (!in.Horizon.IsZero() && !in.ScheduledAt.After(in.Horizon)) {
		return FollowDecision{Verdict: FollowNone}
	}
	waiting := false
	var ids []string
	for _, p := range in.After {
		r := in.Parents[p]
		switch {
		case r == nil || !r.State.Terminal():
			waiting = true
		case r.State != jobs.Succeeded:
			why := string(r.State)
			if r.Reason != "" {
				// A skipped parent says why; a long chain's reasons nest,
				// so keep the first of them.
				why += ": " + replicated.Clip(r.Reason, 300)
			}
			return FollowDecision{Verdict: FollowSkip, Parents: []string{r.ID},
				Reason: fmt.Sprintf("parent %s did not succeed: its run %s ended %s", p, r.ID, why)}
		default:
			ids = append(ids, r.ID)
		}
	}
	switch {
	case waiting:
		return FollowDecision{Verdict: FollowWait}
	case in.Paused:
		return FollowDecision{Verdict: FollowSkip, Parents: ids, Reason: "the job is paused"}
	case in.OutputErr != nil:
		return FollowDecision{Verdict: FollowSkip, Parents: ids, Reason: in.OutputErr.Error()}
	case in.Worker == "":
		return FollowDecision{Verdict: FollowSkip, Parents: ids, Reason: "no alive worker matches the job's target when its parents succeeded"}
	}
	return FollowDecision{Verdict: FollowGrant, Parents: ids}
}

// followers returns the jobs whose after list names job, in set order;
// the index is rebuilt after the job set changes (indexJobs drops it).
// f.mu held.
func (f *FSM) followers(job string) []string {
	if f.deps == nil {
		f.deps = map[string][]string{}
		for _, s := range f.st.Jobs {
			for _, p := range s.After {
				f.deps[p] = append(f.deps[p], s.Name)
			}
		}
	}
	return f.deps[job]
}

// afterEntry is what a version 4 entry does once its op is applied: for
// every attempt that ended and run that finished in it, record the
// notifications due (notify.go) and decide the runs that follow. A run
// skipped here finishes in this entry too, so chains are followed to
// their end in the same entry.
func (f *FSM) afterEntry(l *raft.Log, c replicated.Command) {
	follow := c.Follow
	if follow == nil {
		follow = &replicated.FollowCmd{}
	}
	type ended struct {
		run, attempt string
		state        jobs.State
		known        bool // the attempt is the run's
	}
	seen := make(map[ended]bool, len(f.changes))
	for i := 0; i < len(f.changes); i++ {
		ch := f.changes[i]
		if ch.Kind != ChangeEnded || ch.Run == "" {
			continue
		}
		r := f.st.Runs[ch.Run]
		if r == nil {
			continue
		}
		var att *jobs.Attempt
		if _, n, ok := jobs.SplitAttemptID(ch.Attempt); ok && n >= 1 && n <= len(r.Attempts) {
			att = &r.Attempts[n-1]
		}
		key := ended{run: ch.Run, attempt: ch.Attempt}
		if att != nil {
			key.state, key.known = att.State, true
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		at := follow.At
		if att != nil && at.IsZero() {
			at = att.EndedAt
		}
		f.noticeEnded(l, r, att, at)
		if r.State.Terminal() {
			for _, d := range f.followers(r.Job) {
				f.follow(l, c.V, follow, d, r.ScheduledAt, at)
			}
		}
	}
}

// follow decides the run of job d for scheduled time t (DecideFollow),
// with the worker and key the entry's follow field names, and records it.
func (f *FSM) follow(l *raft.Log, version int, follow *replicated.FollowCmd, d string, t time.Time, at time.Time) {
	spec, ok := f.spec(d)
	if !ok {
		return
	}
	id := jobs.RunID(d, t)
	in := FollowInput{
		Job: d, ScheduledAt: t, After: spec.After, Parents: map[string]*jobs.Run{},
		Existing: f.st.Runs[id], Horizon: f.st.Horizon[d], Paused: f.st.Paused[d] || spec.Paused, Worker: follow.Workers[d],
	}
	for _, p := range spec.After {
		if r := f.st.Runs[jobs.RunID(p, t)]; r != nil {
			in.Parents[p] = r
		}
	}
	key, err := followKey(version, follow, spec, id, t)
	in.OutputErr = err
	worker := in.Worker
	dec := DecideFollow(in)
	if dec.Verdict != FollowGrant && dec.Verdict != FollowSkip {
		return
	}
	r := &jobs.Run{ID: id, Job: d, ScheduledAt: t, Output: key, Trigger: TriggerAfter, After: dec.Parents}
	if dec.Verdict == FollowSkip {
		r.State, r.Reason = jobs.Skipped, dec.Reason
		f.st.Counters[CounterSkipped]++
		f.event(l, jobs.Event{Time: at, Kind: jobs.EventSkipped, Job: d, Run: id, Detail: dec.Reason})
	} else {
		if err := f.newAttempt(l, r, worker, at); err != nil {
			return // a token out of range grants nothing (newAttempt recorded it)
		}
	}
	f.recordRun(r)
	if r.State == jobs.Skipped {
		f.changed(l, Change{Kind: ChangeEnded, Run: id})
	} else {
		f.changed(l, Change{Kind: ChangeGranted, Run: id, Attempt: r.Attempts[0].ID})
	}
}

// RunFollowing is a run whose job other jobs follow, and those jobs.
type RunFollowing struct {
	ScheduledAt time.Time
	Followers   []string
}

// RunFollowers returns, for those of the runs ids whose job other jobs
// follow, the run's scheduled time and the followers. It takes the lock
// once for them all: the leader asks for every group of completions it
// proposes (up to 128 runs), and a lock taken per run queued the
// completions behind every reader of the state at 1,000 runs a second.
func (f *FSM) RunFollowers(ids []string) []RunFollowing {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []RunFollowing
	for _, id := range ids {
		r, ok := f.st.Runs[id]
		if !ok {
			continue
		}
		if ds := f.followers(r.Job); len(ds) > 0 {
			out = append(out, RunFollowing{ScheduledAt: r.ScheduledAt, Followers: slices.Clone(ds)})
		}
	}
	return out
}

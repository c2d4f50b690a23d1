package fsm

import (
	"fmt"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A forced release (op "release", log version 4) ends an attempt's lease
// now, on an operator's word, through the log: a stuck attempt need not
// be waited out. The entry ends the attempt lost, as an expiry would,
// with the operator's reason and name in the audit trail; the run is then
// retried by its job's retry policy with a newer token (the leader's
// retry timer, at once, as after an expiry), or ends lost if it has no
// attempts left. The released worker learns it at its next renewal (the
// attempt is no longer current: a definite "not yours"), which kills its
// process group.
//
// The lease alone does not stop the released token from writing: until
// it expires, it is good on every key of its scope that no newer token
// has touched, and a wedged worker or an escaped process is exactly what
// a release is for. So once the entry has committed, the leader raises
// the job's floor at the store to the released attempt's token
// (fencedstore.Store.RaiseFloor): from then on the store refuses that
// token, and every older one of the job, as stale_owner on every key.
// The retry's token is newer and unaffected. The floor is not part of
// the replicated state (the store is the protected resource, not the
// consensus plane), so a store the leader cannot reach within
// floorRetryWindow leaves the lease released and the floor not raised;
// the answer says so, and releasing the attempt again raises it then
// (a release of an attempt a release ended changes nothing in the log
// and raises the floor again). The leader does not keep retrying on its
// own: an answer that said "later" would be a promise a leadership
// change breaks.

// Bounds on a release's words: reason and asker are kept in the audit
// trail on every server.
const (
	maxReleaseReason = 512
	MaxReleaseAsker  = 256
)

// ReleasedPrefix starts a released attempt's error ("released by WHO:
// REASON"); the worker's own account, when it reports, is added after it.
const ReleasedPrefix = "released by "

// CounterReleases counts forced releases.
const CounterReleases = "releases"

// WasReleased reports whether a forced release ended attempt a.
func WasReleased(a jobs.Attempt) bool {
	return a.Expired && strings.HasPrefix(a.Error, ReleasedPrefix)
}

// CheckRelease checks what an operator sent: an attempt id, and a reason
// of at most maxReleaseReason bytes (the audit trail keeps it).
func CheckRelease(attempt, reason string) error {
	if _, _, ok := jobs.SplitAttemptID(attempt); !ok {
		return fmt.Errorf("release: attempt %q is not an attempt id (JOB@TIME.N, as `fencecron runs` shows it): %w", replicated.Clip(attempt, 80), jobs.ErrInvalidConfig)
	}
	if strings.TrimSpace(reason) == "" {
		return fmt.Errorf("release %s: a reason is required (-reason TEXT): it goes into the audit trail: %w", attempt, jobs.ErrInvalidConfig)
	}
	if len(reason) > maxReleaseReason {
		return fmt.Errorf("release %s: reason of %d bytes, at most %d: %w", attempt, len(reason), maxReleaseReason, jobs.ErrInvalidConfig)
	}
	return nil
}

// DecideRelease says whether attempt a of run r may be released: only the
// run's newest attempt while it is open (pending or running). It is pure,
// so every replica decides the same.
func DecideRelease(r jobs.Run, a jobs.Attempt) error {
	switch {
	case a.Number != len(r.Attempts):
		return fmt.Errorf("release %s: attempt %d of %d was superseded; nothing to release: %w", a.ID, a.Number, len(r.Attempts), jobs.ErrStaleAttempt)
	case a.State.Terminal():
		return fmt.Errorf("release %s: the attempt already ended %s; nothing to release: %w", a.ID, a.State, jobs.ErrStaleAttempt)
	}
	return nil
}

// applyRelease ends the attempt's lease as DecideRelease allows.
func (f *FSM) applyRelease(l *raft.Log, c *replicated.ReleaseCmd) ApplyResult {
	r, a, err := f.attempt(c.Attempt)
	if err != nil {
		return ApplyResult{Err: fmt.Errorf("release: %w", err)}
	}
	if err := DecideRelease(*r, *a); err != nil {
		return ApplyResult{Run: r.Clone(), Err: err}
	}
	reason, asker := replicated.Clip(c.Reason, maxReleaseReason), replicated.Clip(c.Asker, MaxReleaseAsker)
	if asker == "" {
		asker = "unknown"
	}
	a.State, a.EndedAt, a.Expired = jobs.Lost, c.At, true
	a.Error = fmt.Sprintf("%s%s: %s", ReleasedPrefix, asker, reason)
	f.settle(r)
	next := "no attempts left: the run ends " + string(r.State)
	if r.State == jobs.Pending {
		next = "the run is retried with a newer token"
	}
	f.st.Counters[CounterReleases]++
	f.event(l, jobs.Event{Time: c.At, Kind: jobs.EventReleased, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token,
		Detail: fmt.Sprintf("lease released by %s: %q; %s", asker, reason, next)})
	f.ended(l, r, a)
	return ApplyResult{Run: r.Clone()}
}

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
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
	maxReleaseAsker  = 256
)

// ReleasedPrefix starts a released attempt's error ("released by WHO:
// REASON"); the worker's own account, when it reports, is added after it.
const ReleasedPrefix = "released by "

// CounterReleases counts forced releases.
const CounterReleases = "releases"

// releaseCmd ends an attempt's lease now (opRelease).
type releaseCmd struct {
	Attempt string    `json:"attempt"`
	Reason  string    `json:"reason"`
	Asker   string    `json:"asker"`
	At      time.Time `json:"at"`
}

// Releaser is what forced releases go through: the leader decides, a
// node that does not lead forwards (Scheduler, Local(), rpc.Client).
type Releaser interface {
	// Release ends attempt's lease now for reason, as asker asked, raises
	// its job's floor at the store to its token, and returns its run as
	// the entry left it with what became of the floor. An attempt a
	// release already ended is released again: the run is unchanged
	// (Again) and the floor raised again. Errors wrap
	// jobs.ErrInvalidConfig (no reason), jobs.ErrNotFound (no such
	// attempt), jobs.ErrStaleAttempt (it ended otherwise or was
	// superseded: nothing to release), jobs.ErrNotLeader. A floor the
	// store did not raise is no error: the lease is released all the
	// same, and Released.Floor says so.
	Release(ctx context.Context, attempt, reason, asker string) (Released, error)
}

// Released is the answer to a forced release.
type Released struct {
	// Run is the run as the release left it.
	jobs.Run
	// Again is set when a release had already ended the attempt: this
	// one changed nothing in the run and raised the floor again.
	Again bool `json:"already_released,omitempty"`
	// Floor is what became of the job's floor at the store.
	Floor StoreFloor `json:"store_floor"`
}

// StoreFloor is what a release did to its job's floor at the store: once
// raised, the store refuses every token of Job up to Token.
type StoreFloor struct {
	Job string `json:"job"`
	// Raised reports whether the store holds the floor: then Token is
	// the job's floor there, at least the released attempt's token.
	Raised bool `json:"raised"`
	// Token is the floor: the store's when Raised, else the released
	// attempt's token, the floor the release could not raise.
	Token jobs.Fence `json:"token"`
	// Error says why the floor was not raised.
	Error string `json:"error,omitempty"`
}

// floorRetryWindow bounds how long a release tries to raise its floor at
// a store it cannot reach: within the 10 s a follower gives a forwarded
// call, with room for the release's own entry.
const floorRetryWindow = 4 * time.Second

// WasReleased reports whether a forced release ended attempt a.
func WasReleased(a jobs.Attempt) bool {
	return a.Expired && strings.HasPrefix(a.Error, ReleasedPrefix)
}

var (
	_ Releaser = (*Scheduler)(nil)
	_ Releaser = local{}
)

// CheckRelease checks what an operator sent: an attempt id, and a reason
// of at most maxReleaseReason bytes (the audit trail keeps it).
func CheckRelease(attempt, reason string) error {
	if _, _, ok := jobs.SplitAttemptID(attempt); !ok {
		return fmt.Errorf("release: attempt %q is not an attempt id (JOB@TIME.N, as `fencecron runs` shows it): %w", clip(attempt, 80), jobs.ErrInvalidConfig)
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
func (f *FSM) applyRelease(l *raft.Log, c *releaseCmd) applyResult {
	r, a, err := f.attempt(c.Attempt)
	if err != nil {
		return applyResult{Err: fmt.Errorf("release: %w", err)}
	}
	if err := DecideRelease(*r, *a); err != nil {
		return applyResult{Run: r.Clone(), Err: err}
	}
	reason, asker := clip(c.Reason, maxReleaseReason), clip(c.Asker, maxReleaseAsker)
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
	return applyResult{Run: r.Clone()}
}

// Release ends an attempt's lease now, on the leader (see Releaser).
func (s *Scheduler) Release(ctx context.Context, attempt, reason, asker string) (Released, error) {
	if s.Raft.IsLeader() || s.Forwarder == nil {
		return s.Local().(local).Release(ctx, attempt, reason, asker)
	}
	fw, ok := s.Forwarder.(Releaser)
	if !ok {
		return Released{}, fmt.Errorf("release %s: this node cannot forward a release: %w", attempt, jobs.ErrNotLeader)
	}
	return fw.Release(ctx, attempt, reason, asker)
}

// Release implements Releaser as the leader: it checks what it is sent,
// whoever sent it, proposes the release, then raises the job's floor.
func (l local) Release(ctx context.Context, attempt, reason, asker string) (Released, error) {
	if err := l.leads("release " + attempt); err != nil {
		return Released{}, err
	}
	if err := CheckRelease(attempt, reason); err != nil {
		return Released{}, err
	}
	if len(asker) > maxReleaseAsker {
		asker = clip(asker, maxReleaseAsker)
	}
	t := l.s.term.Load()
	if t == nil {
		return Released{}, fmt.Errorf("release %s: %w", attempt, jobs.ErrNotLeader)
	}
	res, err := t.proposeWith(ctx, command{Op: opRelease, Release: &releaseCmd{Attempt: attempt, Reason: reason, Asker: asker, At: l.s.now()}})
	a, found := attemptIn(res.Run, attempt)
	out := Released{Run: res.Run}
	switch {
	case err == nil:
		l.s.Logger.Warn("attempt released by an operator", "attempt", attempt, "asker", asker, "reason", reason, "run_state", res.Run.State)
	case errors.Is(err, jobs.ErrStaleAttempt) && found && WasReleased(a):
		// Released before: nothing more to end, but its floor may not
		// have been raised then.
		out.Again = true
	default:
		return out, err
	}
	out.Floor = l.s.raiseFloor(ctx, res.Run.Job, a)
	return out, nil
}

// attemptIn returns the attempt with id of r.
func attemptIn(r jobs.Run, id string) (jobs.Attempt, bool) {
	for _, a := range r.Attempts {
		if a.ID == id {
			return a, true
		}
	}
	return jobs.Attempt{}, false
}

// raiseFloor raises job's floor at the store to the released attempt's
// token, trying again while the store cannot be reached, for at most
// floorRetryWindow. The release has committed by then, so the asker
// going away does not stop it.
func (s *Scheduler) raiseFloor(ctx context.Context, job string, a jobs.Attempt) StoreFloor {
	out := StoreFloor{Job: job, Token: a.Token}
	if s.Store == nil {
		out.Error = "this node has no fenced store to raise the floor in"
		return out
	}
	tok := a.Token
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), floorRetryWindow)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		floor, err := s.Store.RaiseFloor(ctx, job, tok)
		if err == nil {
			s.Logger.Warn("store floor raised: the released attempt's token, and every older one of its job, is refused", "attempt", a.ID, "job", job, "floor", floor)
			return StoreFloor{Job: job, Raised: true, Token: floor}
		}
		if !errors.Is(err, fencedstore.ErrUnavailable) || !jobs.Sleep(ctx, s.Clock, backoff) {
			s.Logger.Error("store floor not raised: the released attempt's token is still good where no newer token has written; release it again", "attempt", a.ID, "job", job, "err", err)
			out.Error = err.Error()
			return out
		}
		backoff = min(2*backoff, time.Second)
	}
}

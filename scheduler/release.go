package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

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

// releaseWait bounds the wait for a release's entry to commit, within
// the 10 s a follower gives a forwarded call, with floorRetryWindow.
const releaseWait = 5 * time.Second

// Release ends an attempt's lease now, on the leader (see
// Forwarder.Release).
func (s *Scheduler) Release(ctx context.Context, attempt, reason, asker string) (Released, error) {
	return s.toLeader().Release(ctx, attempt, reason, asker)
}

// Release answers Forwarder.Release as the leader: it checks what it is sent,
// whoever sent it, proposes the release, then raises the job's floor.
func (l local) Release(ctx context.Context, attempt, reason, asker string) (Released, error) {
	if err := l.leads("release " + attempt); err != nil {
		return Released{}, err
	}
	if err := fsm.CheckRelease(attempt, reason); err != nil {
		return Released{}, err
	}
	if len(asker) > fsm.MaxReleaseAsker {
		asker = replicated.Clip(asker, fsm.MaxReleaseAsker)
	}
	t := l.s.term.Load()
	if t == nil {
		return Released{}, fmt.Errorf("release %s: %w", attempt, jobs.ErrNotLeader)
	}
	// The release is waited for even if the asker goes away: once it
	// commits, only its answer says the floor is to be raised, and an
	// asker's timeout must not leave a released token good at the store.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
	defer cancel()
	res, err := t.proposeWith(pctx, replicated.Command{Op: replicated.OpRelease, Release: &replicated.ReleaseCmd{Attempt: attempt, Reason: reason, Asker: asker, At: l.s.now()}})
	a, found := attemptIn(res.Run, attempt)
	out := Released{Run: res.Run}
	switch {
	case err == nil:
		l.s.Logger.Warn("attempt released by an operator", jobs.LogRunID, res.Run.ID, jobs.LogAttempt, attempt, "asker", asker, "reason", reason, "run_state", res.Run.State)
	case errors.Is(err, jobs.ErrStaleAttempt) && found && fsm.WasReleased(a):
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
			s.Logger.Warn("store floor raised: the released attempt's token, and every older one of its job, is refused", a.LogArgs("job", job, "floor", floor)...)
			return StoreFloor{Job: job, Raised: true, Token: floor}
		}
		if !errors.Is(err, fencedstore.ErrUnavailable) || !jobs.Sleep(ctx, s.Clock, backoff) {
			s.Logger.Error("store floor not raised: the released attempt's token is still good where no newer token has written; release it again", a.LogArgs("job", job, "err", err)...)
			out.Error = err.Error()
			return out
		}
		backoff = min(2*backoff, time.Second)
	}
}

package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

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
// process group; anything it still publishes carries the older token,
// which the store refuses once the retry has established the newer one.

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
	// Release ends attempt's lease now for reason, as asker asked, and
	// returns its run as the entry left it. Errors wrap
	// jobs.ErrInvalidConfig (no reason), jobs.ErrNotFound (no such
	// attempt), jobs.ErrStaleAttempt (it already ended or was
	// superseded: nothing to release), jobs.ErrNotLeader.
	Release(ctx context.Context, attempt, reason, asker string) (jobs.Run, error)
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
func (s *Scheduler) Release(ctx context.Context, attempt, reason, asker string) (jobs.Run, error) {
	if s.Raft.IsLeader() || s.Forwarder == nil {
		return s.Local().(local).Release(ctx, attempt, reason, asker)
	}
	fw, ok := s.Forwarder.(Releaser)
	if !ok {
		return jobs.Run{}, fmt.Errorf("release %s: this node cannot forward a release: %w", attempt, jobs.ErrNotLeader)
	}
	return fw.Release(ctx, attempt, reason, asker)
}

// Release implements Releaser as the leader: it checks what it is sent,
// whoever sent it, then proposes the release.
func (l local) Release(ctx context.Context, attempt, reason, asker string) (jobs.Run, error) {
	if err := l.leads("release " + attempt); err != nil {
		return jobs.Run{}, err
	}
	if err := CheckRelease(attempt, reason); err != nil {
		return jobs.Run{}, err
	}
	if len(asker) > maxReleaseAsker {
		asker = clip(asker, maxReleaseAsker)
	}
	t := l.s.term.Load()
	if t == nil {
		return jobs.Run{}, fmt.Errorf("release %s: %w", attempt, jobs.ErrNotLeader)
	}
	res, err := t.proposeWith(ctx, command{Op: opRelease, Release: &releaseCmd{Attempt: attempt, Reason: reason, Asker: asker, At: l.s.now()}})
	if err != nil {
		return res.Run, err
	}
	l.s.Logger.Warn("attempt released by an operator", "attempt", attempt, "asker", asker, "reason", reason, "run_state", res.Run.State)
	return res.Run, nil
}

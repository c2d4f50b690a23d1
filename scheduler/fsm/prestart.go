package fsm

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A lease before the start (log version 8; docs/how-it-works.md says
// why). An attempt granted ahead holds a short lease (jobs.Spec.
// PreStartLease) until its start is confirmed, then its whole lease_ttl.
// The leader says in the expiry that the short lease ran
// out (ExpireCmd.BeforeStart), and Apply decides whether that can be
// (DecidePreStartExpiry): the attempt has not started, no leader can have
// confirmed its start (StartUnconfirmed), and the short lease can have
// run out by the entry's own time. Then it is marked never started and
// its takeover, granted in the same entry, costs no retry; a refused one
// changes nothing, and the leader holds the attempt to its whole lease.
//
// Since log version 11 the start of an attempt granted ahead is confirmed
// by an entry (op "confirm_starts", Attempt.StartInLog and
// StartConfirmed): the leader answers the worker only once it is applied.
// A new leader applies every committed entry of earlier terms before it
// acts, and an earlier term's entry it does not hold can never commit;
// so an attempt it finds without StartConfirmed was never let start, and
// it takes it over on the short lease from its election instead of
// waiting a whole lease_ttl (a restore counts such attempts confirmed).
// The log orders a confirmation and an expiry: a confirmation after an
// expiry is refused, and so is an expiry before the start after one.

// ErrPreStartLeaseHeld refuses an expiry that says an attempt's short
// lease before its start ran out when the replicated state says it
// cannot have: nothing changes.
var ErrPreStartLeaseHeld = errors.New("the attempt's lease before its start cannot have run out")

// DecidePreStartExpiry returns nil if attempt a of run r may be expired
// at `at` for its short lease before the start (of length short) by
// expiry e; else an error wrapping ErrPreStartLeaseHeld. It is pure, so
// every replica decides the same.
func DecidePreStartExpiry(r jobs.Run, a jobs.Attempt, short time.Duration, at time.Time, e Expiry) error {
	switch {
	case a.State != jobs.Pending || !a.StartedAt.IsZero():
		return fmt.Errorf("expire %s before its start: %w: it is %s", a.ID, ErrPreStartLeaseHeld, a.State)
	case !StartUnconfirmed(a, e):
		return fmt.Errorf("expire %s before its start: %w: a leader may have confirmed its start (token %s, epoch %d, confirmed in the log: %v)", a.ID, ErrPreStartLeaseHeld, a.Token, e.Entry, a.StartConfirmed)
	case at.Before(a.GrantedAt.Add(short)):
		return fmt.Errorf("expire %s before its start: %w: granted at %s, less than its %s lease before", a.ID, ErrPreStartLeaseHeld, a.GrantedAt.UTC().Format(time.RFC3339Nano), short)
	}
	return nil
}

// ErrStartNotConfirmed refuses a start its worker must not begin.
var ErrStartNotConfirmed = errors.New("start not confirmed")

// applyConfirmStarts confirms each attempt's start in order, each
// answered on its own.
func (f *FSM) applyConfirmStarts(c *replicated.ConfirmStartsCmd) ApplyResult {
	res := ApplyResult{Batch: make([]ApplyResult, len(c.Attempts))}
	for i, id := range c.Attempts {
		r, a, err := f.attempt(id)
		if err == nil {
			err = DecideConfirmStart(*r, *a)
		}
		if res.Batch[i].Err = err; err == nil {
			a.StartConfirmed = true
		}
	}
	return res
}

// DecideConfirmStart returns nil if the worker of attempt a of run r may
// start it: a is r's latest, not ended, and granted ahead. It is pure.
func DecideConfirmStart(r jobs.Run, a jobs.Attempt) error {
	switch {
	case !a.StartInLog:
		return fmt.Errorf("confirm the start of %s: %w: it was not granted ahead", a.ID, ErrStartNotConfirmed)
	case a.State.Terminal():
		return fmt.Errorf("confirm the start of %s: %w: it is %s", a.ID, ErrStartNotConfirmed, a.State)
	case !isLatest(&r, &a):
		return fmt.Errorf("confirm the start of %s: %w: %w", a.ID, ErrStartNotConfirmed, jobs.ErrStaleAttempt)
	}
	return nil
}

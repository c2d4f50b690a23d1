package fsm

import (
	"fmt"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// refusedOutcomes are the store outcomes a store_refused note may name.
var refusedOutcomes = map[string]bool{string(fencedstore.StaleOwner): true, string(fencedstore.Expired): true}

// attempt finds an attempt by id; it must be called with f.mu held.
func (f *FSM) attempt(id string) (*jobs.Run, *jobs.Attempt, error) {
	runID, n, ok := jobs.SplitAttemptID(id)
	if !ok {
		return nil, nil, fmt.Errorf("attempt %q: malformed id: %w", id, jobs.ErrNotFound)
	}
	r, ok := f.st.Runs[runID]
	if !ok || n > len(r.Attempts) {
		return nil, nil, fmt.Errorf("attempt %s: %w", id, jobs.ErrNotFound)
	}
	return r, &r.Attempts[n-1], nil
}

func isLatest(r *jobs.Run, a *jobs.Attempt) bool { return a.Number == len(r.Attempts) }

func (f *FSM) applyStart(l *raft.Log, s *replicated.StartCmd) ApplyResult {
	r, a, err := f.attempt(s.Attempt)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if a.State != jobs.Pending {
		return ApplyResult{Run: r.Clone()} // a repeated start changes nothing
	}
	if !isLatest(r, a) {
		return ApplyResult{Run: r.Clone(), Err: fmt.Errorf("start %s: %w", a.ID, jobs.ErrStaleAttempt)}
	}
	a.State, a.StartedAt = jobs.Running, s.At
	r.State = jobs.Running
	f.event(l, jobs.Event{Time: s.At, Kind: jobs.EventStarted, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token})
	return ApplyResult{Run: r.Clone()}
}

// applyComplete records an attempt's end, and answers with its run.
func (f *FSM) applyComplete(l *raft.Log, version int, c *replicated.Completion) ApplyResult {
	r, err := f.complete(l, version, c)
	if err != nil {
		return ApplyResult{Err: err}
	}
	return ApplyResult{Run: r.Clone()}
}

// complete records an attempt's end and returns its run as the state
// holds it, not a copy.
func (f *FSM) complete(l *raft.Log, version int, c *replicated.Completion) (*jobs.Run, error) {
	r, a, err := f.attempt(c.Attempt)
	if err != nil {
		return nil, err
	}
	if !c.State.Terminal() || (version >= replicated.VersionDecideInApply && !c.State.Known()) {
		return nil, fmt.Errorf("complete %s: state %q is not terminal: %w", a.ID, c.State, jobs.ErrInvalidConfig)
	}
	// A repeated completion changes nothing. The one exception is an
	// attempt whose lease the leader took away: its worker's own account
	// of what happened afterwards (fenced, most often) is recorded.
	if a.State.Terminal() && !(a.Expired && a.State == jobs.Lost) {
		return r, nil
	}
	a.State = c.State
	a.ExitCode, a.Signal = c.ExitCode, c.Signal
	a.StoreOutcome, a.StoreVersion = c.StoreOutcome, c.StoreVersion
	switch {
	case a.Expired && strings.HasPrefix(a.Error, ReleasedPrefix) && c.Error != "":
		a.Error += "; the worker reports: " + c.Error // keep who released it, and why
	case c.Error != "" || !a.Expired:
		a.Error = c.Error
	}
	a.StderrTail = c.StderrTail
	if version >= replicated.VersionStdoutTail {
		a.StdoutTail = c.StdoutTail
	}
	if version >= replicated.VersionHTTPStatus {
		a.HTTPStatus, a.ResponseBytes = c.HTTPStatus, c.ResponseBytes
	}
	if !c.StartedAt.IsZero() && a.StartedAt.IsZero() {
		a.StartedAt = c.StartedAt
	}
	if version >= replicated.VersionBatches && !c.AcceptedAt.IsZero() {
		a.AcceptedAt = c.AcceptedAt
	}
	a.EndedAt = c.EndedAt
	// A job that failed after the store refused one of its writes was
	// fenced: its exit is the refusal's doing (only version 2 notes
	// record refusals, so older entries are unchanged by this).
	errText := c.Error
	if a.State == jobs.Failed && len(a.StoreRefusals) > 0 {
		f.fenceByRefusal(a)
		errText = a.Error
	}
	if version >= replicated.VersionNeverStarted && c.NeverStarted && a.State == jobs.Lost && a.StartedAt.IsZero() && !a.Expired && c.Node == a.Worker {
		a.NeverStarted = mayGoUncounted(*r)
	}
	if isLatest(r, a) {
		f.settle(r)
	}
	kind := jobs.EventCompleted
	detail := string(a.State)
	if a.State == jobs.Fenced {
		kind = jobs.EventFenced
		f.st.Counters[CounterFenced]++
	}
	switch {
	case version < replicated.VersionDecideInApply:
		if c.StoreOutcome == string(fencedstore.StaleOwner) {
			f.st.Counters[CounterStaleRefused]++
		}
	case refusedOutcomes[c.StoreOutcome] && !refusalNoted(r, a, c.StoreOutcome):
		// The worker's own publish was refused, and the store's node has
		// not reported that refusal already.
		f.st.Counters[CounterStaleRefused]++
		f.st.Counters[CounterStoreRefused+c.StoreOutcome]++
	}
	if errText != "" {
		detail += ": " + errText
	}
	f.st.Counters[CounterCompletions]++
	f.event(l, jobs.Event{Time: c.EndedAt, Kind: kind, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: detail})
	f.ended(l, r, a)
	return r, nil
}

// fenceByRefusal turns a failed attempt the store refused into a fenced
// one, its store outcome the first refusal's.
func (f *FSM) fenceByRefusal(a *jobs.Attempt) {
	first := a.StoreRefusals[0]
	outcome, _, _ := strings.Cut(first, " ")
	a.State = jobs.Fenced
	if !refusedOutcomes[a.StoreOutcome] {
		a.StoreOutcome = outcome
	}
	msg := "the store refused this attempt's write (" + first + ")"
	if a.Error != "" {
		msg = a.Error + "; " + msg
	}
	a.Error = msg
}

// refusalNoted reports whether a store_refused note already recorded the
// refusal (outcome) of the attempt's publish of its run's output.
func refusalNoted(r *jobs.Run, a *jobs.Attempt, outcome string) bool {
	for _, n := range a.StoreRefusals {
		if o, rest, _ := strings.Cut(n, " "); o == outcome {
			if key, _, _ := strings.Cut(rest, " "); key == r.Output {
				return true
			}
		}
	}
	return false
}

func (f *FSM) maxAttempts(job string) int {
	s, ok := f.spec(job)
	if !ok {
		return 0 // a job no longer in the set gets no more attempts
	}
	return s.Retries + 1
}

func (f *FSM) applyExpire(l *raft.Log, version int, e *replicated.ExpireCmd) ApplyResult {
	r, a, err := f.attempt(e.Attempt)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if e.State == jobs.Cancelled && isLatest(r, a) && AwaitsRetry(*r) {
		// A newer run replaces one waiting for its retry: it gets none.
		f.cancel(l, r, e.Reason, e.At)
		return ApplyResult{Run: r.Clone()}
	}
	if a.State.Terminal() || !isLatest(r, a) {
		// The attempt already ended or was superseded: a late or repeated
		// expiry never touches a newer attempt.
		return ApplyResult{Run: r.Clone(), Err: fmt.Errorf("expire %s: %w", a.ID, jobs.ErrStaleAttempt)}
	}
	st := e.State
	if st != jobs.Cancelled {
		st = jobs.Lost
	}
	x := Expiry{Entry: f.epochOf(l), Elected: f.st.Epoch, ElectedIndex: f.st.ElectedIndex, Version: version}
	if e.BeforeStart && version >= replicated.VersionPreStartLease {
		spec, _ := f.spec(r.Job) // a job gone from the set: the default lease
		if err := DecidePreStartExpiry(*r, *a, spec.PreStartLease(), e.At, x); err != nil {
			return ApplyResult{Run: r.Clone(), Err: err}
		}
	}
	a.State, a.Error, a.EndedAt, a.Expired = st, e.Reason, e.At, true
	if st == jobs.Lost && e.NeverStarted && version >= replicated.VersionNeverStarted {
		a.NeverStarted = DecideNeverStarted(*r, *a, x)
	}
	f.settle(r)
	kind := jobs.EventExpired
	if st == jobs.Cancelled {
		kind = jobs.EventCancelled
	} else {
		f.st.Counters[CounterExpiries]++
	}
	f.event(l, jobs.Event{Time: e.At, Kind: kind, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: e.Reason})
	f.ended(l, r, a)
	if e.Worker != "" && CountedAttempts(*r) < f.maxAttempts(r.Job) {
		// A takeover refused for its token's range leaves the run
		// waiting for a retry; the expiry itself stands.
		_ = f.newAttempt(l, r, e.Worker, e.At)
	}
	return ApplyResult{Run: r.Clone()}
}

func (f *FSM) applyRetry(l *raft.Log, c *replicated.RetryCmd) ApplyResult {
	r, ok := f.st.Runs[c.Run]
	if !ok {
		return ApplyResult{Err: fmt.Errorf("retry %s: %w", c.Run, jobs.ErrNotFound)}
	}
	latest, ok := r.Latest()
	if !ok || latest.Number != c.After || !Retryable(latest.State) || r.NoRetry {
		return ApplyResult{Run: r.Clone(), Err: fmt.Errorf("retry %s after attempt %d: %w", c.Run, c.After, jobs.ErrStaleAttempt)}
	}
	if CountedAttempts(*r) >= f.maxAttempts(r.Job) {
		return ApplyResult{Run: r.Clone(), Err: fmt.Errorf("retry %s: no attempts left: %w", c.Run, jobs.ErrRunFinished)}
	}
	if err := f.newAttempt(l, r, c.Worker, c.At); err != nil {
		return ApplyResult{Run: r.Clone(), Err: fmt.Errorf("retry %s: %w", c.Run, err)}
	}
	return ApplyResult{Run: r.Clone()}
}

// settle sets a run's state from its newest attempt's, except that a run
// whose newest attempt ended in a retryable state and which has attempts
// left is pending: it has not finished, its retry is due.
// A replaced run (NoRetry) whose attempt would have been retried is
// cancelled. It depends only on replicated state, so every replica agrees.
func (f *FSM) settle(r *jobs.Run) {
	defer f.runFinished(r.State, r)
	a, ok := r.Latest()
	retryable := ok && a.State.Terminal() && Retryable(a.State)
	switch {
	case !ok:
	case retryable && r.NoRetry:
		r.State = jobs.Cancelled
	case retryable && CountedAttempts(*r) < f.maxAttempts(r.Job):
		r.State = jobs.Pending
	default:
		r.State = a.State
	}
}

// AwaitsRetry reports whether a run waits for its next attempt: pending,
// with its newest attempt ended.
func AwaitsRetry(r jobs.Run) bool {
	a, ok := r.Latest()
	return ok && r.State == jobs.Pending && a.State.Terminal()
}

// Retryable reports whether an attempt that ended in st may be followed by
// another: not after success, and not after being fenced (a newer token
// already owns the output).
func Retryable(st jobs.State) bool {
	switch st {
	case jobs.Failed, jobs.TimedOut, jobs.Lost:
		return true
	}
	return false
}

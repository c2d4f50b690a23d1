package scheduler

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// Bounds on the replicated state, so snapshots stay small.
const (
	DefaultMaxRuns = 2000
	maxEvents      = 2000
	maxSkipRanges  = 1000
)

// Command ops.
const (
	opElected   = "elected"
	opSetJobs   = "set_jobs"
	opGrant     = "grant"
	opSkip      = "skip"
	opSkipRange = "skip_range"
	opStart     = "start"
	opComplete  = "complete"
	opExpire    = "expire"
	opRetry     = "retry"
	opPause     = "pause"
	opNote      = "note"
	opAudit     = "audit"
)

// command is one entry of the replicated log. Exactly one payload is set.
type command struct {
	Op        string        `json:"op"`
	Elected   *electedCmd   `json:"elected,omitempty"`
	SetJobs   *setJobsCmd   `json:"set_jobs,omitempty"`
	Grant     *grantCmd     `json:"grant,omitempty"`
	SkipRange *skipRangeCmd `json:"skip_range,omitempty"`
	Start     *startCmd     `json:"start,omitempty"`
	Complete  *Completion   `json:"complete,omitempty"`
	Expire    *expireCmd    `json:"expire,omitempty"`
	Retry     *retryCmd     `json:"retry,omitempty"`
	Pause     *pauseCmd     `json:"pause,omitempty"`
	Note      *noteCmd      `json:"note,omitempty"`
	Audit     *auditCmd     `json:"audit,omitempty"`
}

// electedCmd is the first entry a new leader commits; applying it is how
// every replica learns the epoch from the log itself.
type electedCmd struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
}

type setJobsCmd struct {
	Jobs   []jobs.Spec `json:"jobs"`
	Source string      `json:"source"`
	At     time.Time   `json:"at"`
}

// grantCmd grants the first attempt of a new run (opGrant), or records the
// run as skipped with Reason (opSkip).
type grantCmd struct {
	Job         string    `json:"job"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Output      string    `json:"output,omitempty"`
	Worker      string    `json:"worker,omitempty"`
	Trigger     string    `json:"trigger"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
}

type skipRangeCmd struct {
	jobs.SkipRange
	At time.Time `json:"at"`
}

type startCmd struct {
	Attempt string    `json:"attempt"`
	At      time.Time `json:"at"`
}

// expireCmd takes an attempt's lease away (State lost) or cancels it
// (State cancelled), and if Worker is set and the job allows another
// attempt, grants the run's next attempt to Worker in the same entry.
type expireCmd struct {
	Attempt string     `json:"attempt"`
	State   jobs.State `json:"state"`
	Reason  string     `json:"reason"`
	Worker  string     `json:"worker,omitempty"`
	At      time.Time  `json:"at"`
}

// retryCmd grants the next attempt of a run whose attempt number After
// ended without success.
type retryCmd struct {
	Run    string    `json:"run"`
	After  int       `json:"after"`
	Worker string    `json:"worker"`
	At     time.Time `json:"at"`
}

type pauseCmd struct {
	Job    string    `json:"job"`
	Paused bool      `json:"paused"`
	At     time.Time `json:"at"`
}

// noteCmd records something a worker saw about its attempt (SUSPECT, LOST).
type noteCmd struct {
	Attempt string    `json:"attempt"`
	Kind    string    `json:"kind"`
	Node    string    `json:"node"`
	Detail  string    `json:"detail"`
	At      time.Time `json:"at"`
}

// auditCmd records something a node saw that concerns no run, such as a
// client locked out of its login (jobs.EventLoginFailed).
type auditCmd struct {
	Kind   string    `json:"kind"`
	Node   string    `json:"node"`
	Detail string    `json:"detail"`
	At     time.Time `json:"at"`
}

// Bounds on an audit entry: nodes propose them from what clients do, so
// the FSM keeps them small whatever a proposer sends.
const (
	maxAuditKind   = 32
	maxAuditDetail = 512
)

// fsmKinds are the event kinds the FSM records from its own commands; an
// audit entry may not pose as one of them.
var fsmKinds = map[string]bool{
	jobs.EventElected: true, jobs.EventJobSet: true, jobs.EventGranted: true, jobs.EventSkipped: true,
	jobs.EventStarted: true, jobs.EventCompleted: true, jobs.EventFenced: true, jobs.EventExpired: true,
	jobs.EventCancelled: true, jobs.EventPaused: true, jobs.EventResumed: true, jobs.EventSuspect: true,
	jobs.EventLost: true,
}

// Completion is what a worker reports when an attempt ends. Reporting the
// same completion twice is harmless.
type Completion struct {
	Attempt      string     `json:"attempt"`
	Node         string     `json:"node,omitempty"`
	State        jobs.State `json:"state"`
	ExitCode     *int       `json:"exit_code,omitempty"`
	Signal       string     `json:"signal,omitempty"`
	StoreOutcome string     `json:"store_outcome,omitempty"`
	StoreVersion uint64     `json:"store_version,omitempty"`
	Error        string     `json:"error,omitempty"`
	StderrTail   string     `json:"stderr_tail,omitempty"`
	StartedAt    time.Time  `json:"started_at,omitzero"`
	EndedAt      time.Time  `json:"ended_at"`
}

// applyResult is what FSM.Apply returns to the proposer.
type applyResult struct {
	Run jobs.Run
	Err error
}

// state is the replicated state; it is what snapshots hold.
type state struct {
	Epoch     uint64      `json:"epoch"`
	Leader    string      `json:"leader"`
	ElectedAt time.Time   `json:"elected_at"`
	Jobs      []jobs.Spec `json:"jobs"`
	JobsFrom  string      `json:"jobs_from"`
	JobsAt    time.Time   `json:"jobs_at"`
	JobsHash  string      `json:"jobs_hash"`
	HasJobs   bool        `json:"has_jobs"`
	// Paused is set by pause and cleared by resume, on top of the spec.
	Paused map[string]bool      `json:"paused"`
	Runs   map[string]*jobs.Run `json:"runs"`
	// Order lists run ids oldest grant first.
	Order []string `json:"order"`
	// Horizon is, per job, the latest scheduled time of a run dropped to
	// keep the state bounded; nothing at or before it can be granted again.
	Horizon map[string]time.Time `json:"horizon"`
	// LastScheduled is, per job, the latest scheduled time granted or
	// skipped: where a new leader's catch-up starts.
	LastScheduled map[string]time.Time `json:"last_scheduled"`
	Skips         []jobs.SkipRange     `json:"skips"`
	Events        []jobs.Event         `json:"events"`
	EventSeq      uint64               `json:"event_seq"`
	Counters      map[string]uint64    `json:"counters"`
	// LastIndex is the index of the last applied entry.
	LastIndex uint64 `json:"last_index"`
	// RangeRefusedTerm is the last term in which a grant was refused for
	// a token out of range: the refusal is recorded as an event once per
	// term, so that retrying leaders do not flood the audit trail.
	RangeRefusedTerm uint64 `json:"range_refused_term,omitempty"`
}

// FSM is the scheduler's replicated state machine. It is the only place
// fence tokens are minted: from the term and index of the grant's own log
// entry.
type FSM struct {
	// MaxRuns bounds the runs kept (default DefaultMaxRuns).
	MaxRuns int

	mu          sync.RWMutex
	st          state
	jobsChanged chan struct{}
	subsMu      sync.Mutex
	subs        map[chan struct{}]bool
}

// NewFSM returns an empty FSM.
func NewFSM() *FSM {
	return &FSM{
		MaxRuns:     DefaultMaxRuns,
		st:          emptyState(),
		jobsChanged: make(chan struct{}, 1),
		subs:        map[chan struct{}]bool{},
	}
}

func emptyState() state {
	return state{
		Runs: map[string]*jobs.Run{}, Horizon: map[string]time.Time{},
		Paused: map[string]bool{}, LastScheduled: map[string]time.Time{},
		Counters: map[string]uint64{},
	}
}

var _ raft.FSM = (*FSM)(nil)

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return applyResult{Err: fmt.Errorf("decode command at %d: %w", l.Index, err)}
	}
	f.mu.Lock()
	res := f.apply(l, c)
	f.st.LastIndex = l.Index
	f.mu.Unlock()
	f.notifySubscribers()
	return res
}

func (f *FSM) apply(l *raft.Log, c command) applyResult {
	switch {
	case c.Op == opElected && c.Elected != nil:
		f.st.Epoch, f.st.Leader, f.st.ElectedAt = l.Term, c.Elected.Node, c.Elected.At
		f.st.Counters["elections"]++
		f.event(l, jobs.Event{Time: c.Elected.At, Kind: jobs.EventElected, Node: c.Elected.Node, Epoch: l.Term,
			Detail: fmt.Sprintf("%s leads in epoch %d", c.Elected.Node, l.Term)})
		return applyResult{}
	case c.Op == opSetJobs && c.SetJobs != nil:
		f.st.Jobs, f.st.JobsFrom, f.st.JobsAt, f.st.HasJobs = c.SetJobs.Jobs, c.SetJobs.Source, c.SetJobs.At, true
		f.st.JobsHash = jobs.HashSpecs(c.SetJobs.Jobs)
		for _, s := range c.SetJobs.Jobs {
			// A job new to the cluster starts from now, not from the epoch.
			if _, ok := f.st.LastScheduled[s.Name]; !ok {
				f.st.LastScheduled[s.Name] = c.SetJobs.At
			}
		}
		// A run waiting for a retry its job no longer allows (removed, or
		// fewer retries) has finished.
		for _, id := range f.st.Order {
			if r := f.st.Runs[id]; AwaitsRetry(*r) {
				if f.settle(r); r.State != jobs.Pending {
					f.event(l, jobs.Event{Time: c.SetJobs.At, Kind: jobs.EventCancelled, Job: r.Job, Run: r.ID,
						Detail: fmt.Sprintf("no retry: the new job set allows none; the run ends %s", r.State)})
				}
			}
		}
		f.event(l, jobs.Event{Time: c.SetJobs.At, Kind: jobs.EventJobSet,
			Detail: fmt.Sprintf("%d jobs from %s (hash %s)", len(c.SetJobs.Jobs), c.SetJobs.Source, f.st.JobsHash)})
		notify(f.jobsChanged)
		return applyResult{}
	case (c.Op == opGrant || c.Op == opSkip) && c.Grant != nil:
		return f.applyGrant(l, c.Op, c.Grant)
	case c.Op == opSkipRange && c.SkipRange != nil:
		return f.applySkipRange(l, c.SkipRange)
	case c.Op == opStart && c.Start != nil:
		return f.applyStart(l, c.Start)
	case c.Op == opComplete && c.Complete != nil:
		return f.applyComplete(l, c.Complete)
	case c.Op == opExpire && c.Expire != nil:
		return f.applyExpire(l, c.Expire)
	case c.Op == opRetry && c.Retry != nil:
		return f.applyRetry(l, c.Retry)
	case c.Op == opPause && c.Pause != nil:
		return f.applyPause(l, c.Pause)
	case c.Op == opNote && c.Note != nil:
		return f.applyNote(l, c.Note)
	case c.Op == opAudit && c.Audit != nil:
		return f.applyAudit(l, c.Audit)
	}
	return applyResult{Err: fmt.Errorf("malformed command %q at %d", c.Op, l.Index)}
}

// event appends to the bounded audit trail.
func (f *FSM) event(l *raft.Log, e jobs.Event) {
	f.st.EventSeq++
	e.Seq, e.Index = f.st.EventSeq, l.Index
	f.st.Events = append(f.st.Events, e)
	if over := len(f.st.Events) - maxEvents; over > 0 {
		f.st.Events = slices.Delete(f.st.Events, 0, over)
	}
}

func (f *FSM) spec(job string) (jobs.Spec, bool) {
	i := slices.IndexFunc(f.st.Jobs, func(s jobs.Spec) bool { return s.Name == job })
	if i < 0 {
		return jobs.Spec{}, false
	}
	return f.st.Jobs[i], true
}

func (f *FSM) noteScheduled(job string, at time.Time) {
	if at.After(f.st.LastScheduled[job]) {
		f.st.LastScheduled[job] = at
	}
}

func (f *FSM) applyGrant(l *raft.Log, op string, g *grantCmd) applyResult {
	if _, ok := f.spec(g.Job); !ok {
		return applyResult{Err: fmt.Errorf("grant %s: %w", g.Job, jobs.ErrUnknownJob)}
	}
	id := jobs.RunID(g.Job, g.ScheduledAt)
	if r, ok := f.st.Runs[id]; ok {
		return applyResult{Run: r.Clone(), Err: fmt.Errorf("grant %s: %w", id, jobs.ErrDuplicateRun)}
	}
	if h, ok := f.st.Horizon[g.Job]; ok && !g.ScheduledAt.After(h) {
		return applyResult{Err: fmt.Errorf("grant %s: at or before the retained horizon %s: %w", id, h.Format(time.RFC3339), jobs.ErrDuplicateRun)}
	}
	r := &jobs.Run{ID: id, Job: g.Job, ScheduledAt: g.ScheduledAt, Output: g.Output, Trigger: g.Trigger}
	if op == opSkip {
		r.State, r.Reason = jobs.Skipped, g.Reason
		f.st.Counters["skipped"]++
		f.event(l, jobs.Event{Time: g.At, Kind: jobs.EventSkipped, Job: g.Job, Run: id, Detail: g.Reason})
	} else {
		r.State = jobs.Pending
		if err := f.newAttempt(l, r, g.Worker, g.At); err != nil {
			return applyResult{Err: fmt.Errorf("grant %s: %w", id, err)} // the run is not recorded
		}
	}
	f.st.Runs[id] = r
	f.st.Order = append(f.st.Order, id)
	f.noteScheduled(g.Job, g.ScheduledAt)
	f.trim()
	return applyResult{Run: r.Clone()}
}

// newAttempt grants the run's next attempt, minting its token from this
// very log entry. It refuses (ErrTokenRange, and an event) when the
// entry's term or index is outside the range a token may take
// (fencedstore.Token): a token no store accepts must never be handed out,
// and such a term can only come from a peer that moved it on purpose.
func (f *FSM) newAttempt(l *raft.Log, r *jobs.Run, worker string, at time.Time) error {
	if err := (fencedstore.Token{Epoch: l.Term, Seq: l.Index}).Validate(); err != nil {
		f.st.Counters["grants_refused"]++
		err = fmt.Errorf("%w: Raft term %d and index %d cannot make a fence token (epoch and seq must be 1 to %d; every store would refuse it): %v",
			jobs.ErrTokenRange, l.Term, l.Index, int64(math.MaxInt64), err)
		if f.st.RangeRefusedTerm != l.Term {
			f.st.RangeRefusedTerm = l.Term
			f.event(l, jobs.Event{Time: at, Kind: jobs.EventGrantRefused, Node: worker, Job: r.Job, Run: r.ID, Epoch: l.Term,
				Detail: fmt.Sprintf("attempt %d not granted: %v; every grant in this term is refused (recorded once per term)", len(r.Attempts)+1, err)})
		}
		return err
	}
	n := len(r.Attempts) + 1
	a := jobs.Attempt{
		ID: jobs.AttemptID(r.ID, n), Number: n,
		Token:  jobs.Fence{Epoch: l.Term, Seq: l.Index},
		Worker: worker, State: jobs.Pending, GrantedAt: at,
	}
	r.Attempts = append(r.Attempts, a)
	r.State = jobs.Pending
	f.st.Counters["grants"]++
	f.event(l, jobs.Event{Time: at, Kind: jobs.EventGranted, Node: worker, Job: r.Job, Run: r.ID, Attempt: a.ID,
		Token: &a.Token, Detail: fmt.Sprintf("attempt %d to %s with token %s", n, worker, a.Token)})
	return nil
}

func (f *FSM) applySkipRange(l *raft.Log, c *skipRangeCmd) applyResult {
	f.st.Skips = append(f.st.Skips, c.SkipRange)
	if over := len(f.st.Skips) - maxSkipRanges; over > 0 {
		f.st.Skips = slices.Delete(f.st.Skips, 0, over)
	}
	f.noteScheduled(c.Job, c.To)
	f.st.Counters["skipped"] += uint64(c.Count)
	f.event(l, jobs.Event{Time: c.At, Kind: jobs.EventSkipped, Job: c.Job,
		Detail: fmt.Sprintf("%d fire times from %s to %s: %s", c.Count, c.From.Format(time.RFC3339), c.To.Format(time.RFC3339), c.Reason)})
	return applyResult{}
}

// trim drops the oldest finished runs beyond MaxRuns, moving each job's
// horizon forward so a dropped (job, scheduled time) stays ungrantable.
func (f *FSM) trim() {
	limit := f.MaxRuns
	if limit <= 0 {
		limit = DefaultMaxRuns
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
		delete(f.st.Runs, r.ID)
		drop++
	}
	f.st.Order = f.st.Order[drop:]
}

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

func (f *FSM) applyStart(l *raft.Log, s *startCmd) applyResult {
	r, a, err := f.attempt(s.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	if a.State != jobs.Pending {
		return applyResult{Run: r.Clone()} // a repeated start changes nothing
	}
	if !isLatest(r, a) {
		return applyResult{Run: r.Clone(), Err: fmt.Errorf("start %s: %w", a.ID, jobs.ErrStaleAttempt)}
	}
	a.State, a.StartedAt = jobs.Running, s.At
	r.State = jobs.Running
	f.event(l, jobs.Event{Time: s.At, Kind: jobs.EventStarted, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token})
	return applyResult{Run: r.Clone()}
}

func (f *FSM) applyComplete(l *raft.Log, c *Completion) applyResult {
	r, a, err := f.attempt(c.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	if !c.State.Terminal() {
		return applyResult{Err: fmt.Errorf("complete %s: state %q is not terminal", a.ID, c.State)}
	}
	// A repeated completion changes nothing. The one exception is an
	// attempt whose lease the leader took away: its worker's own account
	// of what happened afterwards (fenced, most often) is recorded.
	if a.State.Terminal() && !(a.Expired && a.State == jobs.Lost) {
		return applyResult{Run: r.Clone()}
	}
	a.State = c.State
	a.ExitCode, a.Signal = c.ExitCode, c.Signal
	a.StoreOutcome, a.StoreVersion = c.StoreOutcome, c.StoreVersion
	if c.Error != "" || !a.Expired {
		a.Error = c.Error
	}
	a.StderrTail = c.StderrTail
	if !c.StartedAt.IsZero() && a.StartedAt.IsZero() {
		a.StartedAt = c.StartedAt
	}
	a.EndedAt = c.EndedAt
	if isLatest(r, a) {
		f.settle(r)
	}
	kind := jobs.EventCompleted
	detail := string(c.State)
	if c.State == jobs.Fenced {
		kind = jobs.EventFenced
		f.st.Counters["fenced"]++
	}
	if c.StoreOutcome == "stale_owner" {
		f.st.Counters["stale_refused"]++
	}
	if c.Error != "" {
		detail += ": " + c.Error
	}
	f.st.Counters["completions"]++
	f.event(l, jobs.Event{Time: c.EndedAt, Kind: kind, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: detail})
	return applyResult{Run: r.Clone()}
}

func (f *FSM) maxAttempts(job string) int {
	s, ok := f.spec(job)
	if !ok {
		return 0 // a job no longer in the set gets no more attempts
	}
	return s.Retries + 1
}

func (f *FSM) applyExpire(l *raft.Log, e *expireCmd) applyResult {
	r, a, err := f.attempt(e.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	if e.State == jobs.Cancelled && isLatest(r, a) && AwaitsRetry(*r) {
		// A newer run replaces one waiting for its retry: it gets none.
		r.NoRetry = true
		f.settle(r)
		f.event(l, jobs.Event{Time: e.At, Kind: jobs.EventCancelled, Job: r.Job, Run: r.ID, Detail: "no retry: " + e.Reason})
		return applyResult{Run: r.Clone()}
	}
	if a.State.Terminal() || !isLatest(r, a) {
		// The attempt already ended or was superseded: a late or repeated
		// expiry never touches a newer attempt.
		return applyResult{Run: r.Clone(), Err: fmt.Errorf("expire %s: %w", a.ID, jobs.ErrStaleAttempt)}
	}
	st := e.State
	if st != jobs.Cancelled {
		st = jobs.Lost
	}
	a.State, a.Error, a.EndedAt, a.Expired = st, e.Reason, e.At, true
	f.settle(r)
	kind := jobs.EventExpired
	if st == jobs.Cancelled {
		kind = jobs.EventCancelled
	} else {
		f.st.Counters["expiries"]++
	}
	f.event(l, jobs.Event{Time: e.At, Kind: kind, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: e.Reason})
	if e.Worker != "" && len(r.Attempts) < f.maxAttempts(r.Job) {
		// A takeover refused for its token's range leaves the run
		// waiting for a retry; the expiry itself stands.
		_ = f.newAttempt(l, r, e.Worker, e.At)
	}
	return applyResult{Run: r.Clone()}
}

func (f *FSM) applyRetry(l *raft.Log, c *retryCmd) applyResult {
	r, ok := f.st.Runs[c.Run]
	if !ok {
		return applyResult{Err: fmt.Errorf("retry %s: %w", c.Run, jobs.ErrNotFound)}
	}
	latest, ok := r.Latest()
	if !ok || latest.Number != c.After || !Retryable(latest.State) || r.NoRetry {
		return applyResult{Run: r.Clone(), Err: fmt.Errorf("retry %s after attempt %d: %w", c.Run, c.After, jobs.ErrStaleAttempt)}
	}
	if len(r.Attempts) >= f.maxAttempts(r.Job) {
		return applyResult{Run: r.Clone(), Err: fmt.Errorf("retry %s: no attempts left: %w", c.Run, jobs.ErrRunFinished)}
	}
	if err := f.newAttempt(l, r, c.Worker, c.At); err != nil {
		return applyResult{Run: r.Clone(), Err: fmt.Errorf("retry %s: %w", c.Run, err)}
	}
	return applyResult{Run: r.Clone()}
}

// settle sets a run's state from its newest attempt's, except that a run
// whose newest attempt ended in a retryable state and which has attempts
// left is pending: it has not finished, its retry is due.
// A replaced run (NoRetry) whose attempt would have been retried is
// cancelled. It depends only on replicated state, so every replica agrees.
func (f *FSM) settle(r *jobs.Run) {
	a, ok := r.Latest()
	retryable := ok && a.State.Terminal() && Retryable(a.State)
	switch {
	case !ok:
	case retryable && r.NoRetry:
		r.State = jobs.Cancelled
	case retryable && len(r.Attempts) < f.maxAttempts(r.Job):
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

func (f *FSM) applyPause(l *raft.Log, p *pauseCmd) applyResult {
	if _, ok := f.spec(p.Job); !ok {
		return applyResult{Err: fmt.Errorf("pause %s: %w", p.Job, jobs.ErrUnknownJob)}
	}
	kind := jobs.EventResumed
	if p.Paused {
		f.st.Paused[p.Job] = true
		kind = jobs.EventPaused
	} else {
		delete(f.st.Paused, p.Job)
		// Resuming does not catch up on the paused time.
		f.noteScheduled(p.Job, p.At)
	}
	f.event(l, jobs.Event{Time: p.At, Kind: kind, Job: p.Job})
	return applyResult{}
}

func (f *FSM) applyNote(l *raft.Log, n *noteCmd) applyResult {
	r, a, err := f.attempt(n.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	f.st.Counters[n.Kind]++
	f.event(l, jobs.Event{Time: n.At, Kind: n.Kind, Node: n.Node, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: n.Detail})
	return applyResult{Run: r.Clone()}
}

// applyAudit appends a node's audit entry. Any kind but the FSM's own is
// taken, so a newer node's kinds apply the same on older replicas; the
// detail is cut to maxAuditDetail bytes.
func (f *FSM) applyAudit(l *raft.Log, a *auditCmd) applyResult {
	if a.Kind == "" || len(a.Kind) > maxAuditKind || fsmKinds[a.Kind] {
		return applyResult{Err: fmt.Errorf("audit entry of kind %q: %w", a.Kind, jobs.ErrInvalidConfig)}
	}
	detail := a.Detail
	if len(detail) > maxAuditDetail {
		detail = strings.ToValidUTF8(detail[:maxAuditDetail], "") + "..."
	}
	f.event(l, jobs.Event{Time: a.At, Kind: a.Kind, Node: a.Node, Detail: detail})
	return applyResult{}
}

// Snapshot implements raft.FSM.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := json.Marshal(f.st)
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st := emptyState()
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	fresh := emptyState()
	if st.Runs == nil {
		st.Runs = fresh.Runs
	}
	if st.Horizon == nil {
		st.Horizon = fresh.Horizon
	}
	if st.Paused == nil {
		st.Paused = fresh.Paused
	}
	if st.LastScheduled == nil {
		st.LastScheduled = fresh.LastScheduled
	}
	if st.Counters == nil {
		st.Counters = fresh.Counters
	}
	f.mu.Lock()
	f.st = st
	// A snapshot written before runs waited for their retries as pending
	// holds them as failed or lost; settling again gives them their retry.
	for _, r := range f.st.Runs {
		f.settle(r)
	}
	f.mu.Unlock()
	notify(f.jobsChanged)
	f.notifySubscribers()
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Subscribe returns a channel signalled, coalesced, after every applied
// entry, and a function that ends the subscription.
func (f *FSM) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	f.subsMu.Lock()
	f.subs[ch] = true
	f.subsMu.Unlock()
	return ch, func() {
		f.subsMu.Lock()
		delete(f.subs, ch)
		f.subsMu.Unlock()
	}
}

func (f *FSM) notifySubscribers() {
	f.subsMu.Lock()
	defer f.subsMu.Unlock()
	for ch := range f.subs {
		notify(ch)
	}
}

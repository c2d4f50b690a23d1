package scheduler

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// grantCmd grants the first attempt of a new run (opGrant) as DecideGrant
// decides, or records the run as skipped with Reason (opSkip: the
// leader's own reason, such as no worker matching). Force (version 2)
// overrides the job's overlap policy.
type grantCmd struct {
	Job         string    `json:"job"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Output      string    `json:"output,omitempty"`
	Worker      string    `json:"worker,omitempty"`
	Trigger     string    `json:"trigger"`
	Force       bool      `json:"force,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
	// Ahead marks a grant proposed before the run's fire time (log
	// version 4, see pregrant.go).
	Ahead bool `json:"ahead,omitempty"`
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
	// NeverStarted is the leader's word that the attempt's process never
	// started (log version 5, startconfirm.go); Apply decides whether
	// the attempt then counts against the job's retries.
	NeverStarted bool `json:"never_started,omitempty"`
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
	jobs.EventLost: true, jobs.EventGrantRefused: true, jobs.EventForced: true, jobs.NoteStoreRefused: true,
	jobs.EventReleased: true, jobs.EventWaiting: true, jobs.EventAdmitted: true,
}

// Cluster counters: their names are fixed here, never taken from what a
// caller sends.
const (
	CounterElections     = "elections"
	CounterGrants        = "grants"
	CounterGrantsRefused = "grants_refused"
	CounterSkipped       = "skipped"
	CounterCompletions   = "completions"
	CounterFenced        = "fenced"
	CounterExpiries      = "expiries"
	// CounterStaleRefused counts the store's refusals of attempts'
	// writes (stale_owner and expired), whether a worker reported its
	// own publish refused or the node serving the store reported a
	// job's (jobs.NoteStoreRefused); CounterStoreRefused+outcome counts
	// them by outcome.
	CounterStaleRefused = "stale_refused"
	CounterStoreRefused = "store_refused_"
	CounterSuspect      = jobs.EventSuspect
	CounterLost         = jobs.EventLost
)

// refusedOutcomes are the store outcomes a store_refused note may name.
var refusedOutcomes = map[string]bool{string(fencedstore.StaleOwner): true, string(fencedstore.Expired): true}

// maxStoreRefusals bounds the refusals kept on one attempt (all are
// counted), and maxRefusalDetail the size of one (a store key is at most
// 1024 bytes).
const (
	maxStoreRefusals = 8
	maxRefusalDetail = 1200
)

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
	// AcceptedAt is when the worker received the dispatch (version 3).
	AcceptedAt time.Time `json:"accepted_at,omitzero"`
	// StdoutTail is the end of stdout when it was not published (version
	// 4; see output.go).
	StdoutTail string `json:"stdout_tail,omitempty"`
	// NeverStarted is the worker's word that it gave the attempt up
	// before starting its process (version 5; see startconfirm.go).
	NeverStarted bool `json:"never_started,omitempty"`
}

// applyResult is what FSM.Apply returns to the proposer.
type applyResult struct {
	Run jobs.Run
	Err error
	// Batch is, for a batch grant (opGrants) or a group of completions
	// (opCompletes) or starts (opStarts), each one's own result in the
	// entry's order.
	Batch []applyResult
	// Backfill is what a backfill entry decided (backfill.go).
	Backfill *BackfillResult
	// Epoch and Index are an election entry's (startconfirm.go).
	Epoch, Index uint64
}

// state is the replicated state; it is what snapshots hold.
type state struct {
	Epoch     uint64    `json:"epoch"`
	Leader    string    `json:"leader"`
	ElectedAt time.Time `json:"elected_at"`
	// ElectedIndex is the log index of the last election entry: an
	// attempt granted after it was granted by the leader loop that
	// committed it (startconfirm.go).
	ElectedIndex uint64 `json:"elected_index,omitempty"`
	// Jobs is replaced whole by a new set, never changed in place: a
	// snapshot encodes it after letting go of the lock.
	Jobs     []jobs.Spec `json:"jobs,omitempty"`
	JobsFrom string      `json:"jobs_from"`
	JobsAt   time.Time   `json:"jobs_at"`
	JobsHash string      `json:"jobs_hash"`
	HasJobs  bool        `json:"has_jobs"`
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
	// LastRuns is, per job, its newest run as it was last seen: the run
	// itself may have been dropped (see RunSummary).
	LastRuns map[string]RunSummary `json:"last_runs,omitempty"`
	Skips    []jobs.SkipRange      `json:"skips"`
	Events   []jobs.Event          `json:"events"`
	EventSeq uint64                `json:"event_seq"`
	Counters map[string]uint64     `json:"counters"`
	// LastIndex is the index of the last applied entry.
	LastIndex uint64 `json:"last_index"`
	// RangeRefusedTerm is the last term in which a grant was refused for
	// a token out of range: the refusal is recorded as an event once per
	// term, so that retrying leaders do not flood the audit trail.
	RangeRefusedTerm uint64 `json:"range_refused_term,omitempty"`
	// Version is the format version of a snapshot (LogVersion when
	// written; absent, and so 1, in snapshots older than versions).
	Version int `json:"log_version,omitempty"`
	// EpochBase is added to the Raft term to make the epoch. It is 0
	// until the cluster is restored from a snapshot (`fencecron snapshot
	// restore`, PrepareRestore): then it is at least the greatest epoch
	// the snapshot's cluster, the restoring cluster and its store had
	// seen, so that epochs and tokens go on growing in a cluster whose
	// Raft terms started again from 1.
	EpochBase uint64 `json:"epoch_base,omitempty"`
	// JobStats are each job's finished runs by state and last success
	// (jobstats.go); nil until a run of the set finishes.
	JobStats map[string]*JobStats `json:"job_stats,omitempty"`
	// Notices are the notifications pending delivery, NoticeSeq the last
	// notice's id, and LastFinal each job's last finished run's state
	// (for recovered); see notify.go.
	Notices   []Notice              `json:"notices,omitempty"`
	NoticeSeq uint64                `json:"notice_seq,omitempty"`
	LastFinal map[string]jobs.State `json:"last_final,omitempty"`
	// Backfills are, per job, the fire times a backfill still has to
	// grant (backfill.go; log version 4).
	Backfills map[string]*backfillQueue `json:"backfills,omitempty"`
	// GroupQueue is, per concurrency group, its waiting runs, oldest fire
	// time first (groups.go).
	GroupQueue map[string][]GroupWaiter `json:"group_queue,omitempty"`
}

// FSM is the scheduler's replicated state machine. It is the only place
// fence tokens are minted: from the term and index of the grant's own log
// entry.
type FSM struct {
	// MaxRuns bounds the runs kept (default DefaultMaxRuns), and
	// MaxEvents the audit trail (default 2000). Every server of a
	// cluster must use the same bounds: trimming is part of applying.
	MaxRuns   int
	MaxEvents int
	// History, if set, receives every finished run and event the bounded
	// state lets go of, to keep beyond it (scheduler/history). Set it
	// before the FSM is given to Raft.
	History Archive
	// Logger receives a halt of the log (default slog.Default()).
	Logger *slog.Logger

	mu       sync.RWMutex
	st       state
	idx      jobIndex
	halted   error
	logHalts atomic.Uint64
	// changes collects what the entry being applied changed (f.mu held).
	changes []Change
	// trimmedRuns and trimmedEvents collect what the entry being applied
	// let go of, for History (f.mu held).
	trimmedRuns   []jobs.Run
	trimmedEvents []jobs.Event
	// deps indexes the jobs that follow each job, in set order (after.go);
	// nil until needed after the job set changes.
	deps map[string][]string
	// groups caches the job set's group limits; groupsOf is the hash of
	// the set it was built from (groups.go).
	groups   map[string]jobs.Group
	groupsOf string

	subsMu  sync.Mutex
	subs    map[chan struct{}]bool
	feedsMu sync.Mutex
	feeds   map[*ChangeFeed]bool
}

// NewFSM returns an empty FSM.
func NewFSM() *FSM {
	f := &FSM{
		MaxRuns: DefaultMaxRuns,
		st:      emptyState(),
		subs:    map[chan struct{}]bool{},
		feeds:   map[*ChangeFeed]bool{},
	}
	f.indexJobs()
	f.indexRuns()
	return f
}

func (f *FSM) logger() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.Default()
}

func emptyState() state {
	return state{
		Runs: map[string]*jobs.Run{}, Horizon: map[string]time.Time{},
		Paused: map[string]bool{}, LastScheduled: map[string]time.Time{},
		LastRuns: map[string]RunSummary{}, Counters: map[string]uint64{},
		GroupQueue: map[string][]GroupWaiter{},
	}
}

var _ raft.FSM = (*FSM)(nil)

// Apply implements raft.FSM. An entry it cannot read halts it (see
// logversion.go): that entry and every later one are answered with an
// error wrapping ErrLogHalted and change nothing.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	if f.halted != nil {
		err := f.halted
		f.mu.Unlock()
		return applyResult{Err: err}
	}
	c, err := decodeEntry(l)
	if err != nil {
		f.halt(l, err)
		err = f.halted
		f.mu.Unlock()
		return applyResult{Err: err}
	}
	res, ok := f.applyEntry(l, c)
	if !ok {
		f.mu.Unlock()
		return res
	}
	f.st.LastIndex = l.Index
	chs := f.changes
	f.changes = nil
	if f.History != nil {
		f.History.Archive(l.Index, f.trimmedRuns, f.trimmedEvents)
		f.trimmedRuns, f.trimmedEvents = nil, nil
	}
	f.mu.Unlock()
	if f.History != nil {
		f.History.Settle()
	}
	f.publish(chs)
	f.notifySubscribers()
	return res
}

// applyEntry applies a decoded entry: its op, then what follows it in the
// same entry (afterEntry, promoteWaiters). A panic halts the FSM at the
// entry, as an entry it cannot read does (ok false): every replica meets
// the same panic at the same entry, and one that went on would apply the
// later entries to a state the panic left half-changed. A halted FSM takes
// no snapshot, so after a restart on a fixed binary Raft applies the entry
// again from the last snapshot. f.mu held.
func (f *FSM) applyEntry(l *raft.Log, c command) (res applyResult, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			f.logger().Error("applying an entry panicked", "index", l.Index, "term", l.Term, "op", c.Op,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			f.halt(l, fmt.Errorf("applying its op %q panicked: %v", c.Op, p))
			f.changes, f.trimmedRuns, f.trimmedEvents = nil, nil, nil
			res, ok = applyResult{Err: f.halted}, false
		}
	}()
	res = f.apply(l, c)
	if c.V >= vFollow {
		f.afterEntry(l, c)
	}
	if c.V >= vGroups && len(f.st.GroupQueue) > 0 {
		f.promoteWaiters(l, commandTime(c))
	}
	return res, true
}

// changed records a change of the entry being applied.
func (f *FSM) changed(l *raft.Log, ch Change) {
	ch.Index = l.Index
	f.changes = append(f.changes, ch)
}

// ended records that attempt a of run r ended (or its run was finished
// without another attempt).
func (f *FSM) ended(l *raft.Log, r *jobs.Run, a *jobs.Attempt) {
	f.changed(l, Change{Kind: ChangeEnded, Run: r.ID, Attempt: a.ID})
}

// apply applies a decoded entry by its op's row of opTable; c.V says by
// which version's rules.
func (f *FSM) apply(l *raft.Log, c command) applyResult {
	o := opsByName[c.Op]
	if err := DecideTermStarted(c.V, o.mintsToken(&c), f.epochOf(l), f.st.Epoch); err != nil {
		return applyResult{Err: err} // termstart.go: nothing changes
	}
	return o.apply(f, l, &c)
}

// applyElected records a new leader's first entry: its epoch comes from
// the entry itself.
func (f *FSM) applyElected(l *raft.Log, e *electedCmd) applyResult {
	epoch := f.epochOf(l)
	f.st.Epoch, f.st.Leader, f.st.ElectedAt, f.st.ElectedIndex = epoch, e.Node, e.At, l.Index
	f.st.Counters[CounterElections]++
	f.event(l, jobs.Event{Time: e.At, Kind: jobs.EventElected, Node: e.Node, Epoch: epoch,
		Detail: fmt.Sprintf("%s leads in epoch %d", e.Node, epoch)})
	return applyResult{Epoch: epoch, Index: l.Index}
}

// applySetJobs replaces the job set.
func (f *FSM) applySetJobs(l *raft.Log, c *setJobsCmd) applyResult {
	f.st.Jobs, f.st.JobsFrom, f.st.JobsAt, f.st.HasJobs = c.Jobs, c.Source, c.At, true
	f.st.JobsHash = c.Hash
	if f.st.JobsHash == "" {
		f.st.JobsHash = jobs.HashSpecs(c.Jobs)
	}
	f.indexJobs()
	f.pruneJobStats()
	f.dropBackfills()
	for _, s := range c.Jobs {
		// A job new to the cluster starts from now, not from the epoch.
		if _, ok := f.st.LastScheduled[s.Name]; !ok {
			f.st.LastScheduled[s.Name] = c.At
		}
	}
	// A run waiting for a retry its job no longer allows (removed, or
	// fewer retries) has finished.
	for _, id := range f.st.Order {
		if r := f.st.Runs[id]; AwaitsRetry(*r) {
			if f.settle(r); r.State != jobs.Pending {
				f.event(l, jobs.Event{Time: c.At, Kind: jobs.EventCancelled, Job: r.Job, Run: r.ID,
					Detail: fmt.Sprintf("no retry: the new job set allows none; the run ends %s", r.State)})
				a, _ := r.Latest()
				f.ended(l, r, a)
			}
		}
	}
	f.event(l, jobs.Event{Time: c.At, Kind: jobs.EventJobSet,
		Detail: fmt.Sprintf("%d jobs from %s (hash %s)", len(c.Jobs), c.Source, f.st.JobsHash)})
	f.changed(l, Change{Kind: ChangeJobs})
	return applyResult{}
}

// event appends to the bounded audit trail.
func (f *FSM) event(l *raft.Log, e jobs.Event) {
	f.st.EventSeq++
	e.Seq, e.Index = f.st.EventSeq, l.Index
	f.st.Events = append(f.st.Events, e)
	limit := f.MaxEvents
	if limit <= 0 {
		limit = maxEvents
	}
	if over := len(f.st.Events) - limit; over > 0 {
		if f.History != nil {
			f.trimmedEvents = append(f.trimmedEvents, f.st.Events[:over]...)
		}
		// Dropping from the front by reslicing is O(1) per event: append
		// copies the live events into a new array once the old one is
		// full, which frees the dropped ones. slices.Delete moved all
		// 2000 on every event, a leader's hottest copy at 500 runs/s.
		f.st.Events = f.st.Events[over:]
	}
}

func (f *FSM) spec(job string) (jobs.Spec, bool) {
	i, ok := f.idx.byName[job]
	if !ok {
		return jobs.Spec{}, false
	}
	return f.st.Jobs[i], true
}

func (f *FSM) noteScheduled(job string, at time.Time) {
	if at.After(f.st.LastScheduled[job]) {
		f.st.LastScheduled[job] = at
	}
}

func (f *FSM) applyGrant(l *raft.Log, version int, op string, g *grantCmd) applyResult {
	spec, known := f.spec(g.Job)
	id := jobs.RunID(g.Job, g.ScheduledAt)
	if g.Trigger == TriggerBackfill && version >= vBackfill && known {
		if err := f.admitBackfill(op, g, spec); err != nil {
			return applyResult{Err: err}
		}
	}
	in := GrantInput{
		Job: g.Job, ScheduledAt: g.ScheduledAt, Trigger: g.Trigger, Force: g.Force, Version: version,
		Known: known, Overlap: spec.Overlap, Horizon: f.st.Horizon[g.Job], Existing: f.st.Runs[id],
	}
	if op == opSkip {
		in.Skip = g.Reason
		if in.Skip == "" {
			in.Skip = "skipped by the leader"
		}
	}
	if version >= vDecideInApply {
		in.Open = f.openRuns(g.Job)
	}
	d := DecideGrant(in)
	if d.Verdict == GrantRefused {
		res := applyResult{Err: d.Err}
		if in.Existing != nil {
			res.Run = in.Existing.Clone()
		}
		return res
	}
	if g.Ahead && version >= vAhead {
		if err := DecideAhead(in); err != nil {
			return applyResult{Err: err}
		}
	}
	r := &jobs.Run{ID: id, Job: g.Job, ScheduledAt: g.ScheduledAt, Output: g.Output, Trigger: g.Trigger}
	if d.Verdict == GrantSkipped {
		if op == opSkip {
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
		if version < vGroups || spec.GroupLimits == nil || f.admit(l, r, *spec.GroupLimits, g.At) == Admit {
			if err := f.newAttempt(l, r, g.Worker, g.At); err != nil {
				return applyResult{Err: fmt.Errorf("grant %s: %w", id, err)} // the run is not recorded
			}
		}
		if g.Force && version >= vDecideInApply && r.State != jobs.Skipped { // skipped: its group's queue was full
			r.Forced = true
			detail := fmt.Sprintf("trigger -force: %s granted whatever overlap: %s says", id, spec.Overlap)
			if len(d.Overrode) > 0 {
				detail += fmt.Sprintf("; it runs beside %s", strings.Join(d.Overrode, ", "))
			}
			f.event(l, jobs.Event{Time: g.At, Kind: jobs.EventForced, Job: g.Job, Run: id, Detail: detail})
		}
	}
	f.recordRun(r)
	return applyResult{Run: r.Clone()}
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
	f.st.Counters[CounterSkipped] += uint64(c.Count)
	f.firesSkipped(c.Job, c.Count)
	f.event(l, jobs.Event{Time: c.At, Kind: jobs.EventSkipped, Job: c.Job,
		Detail: fmt.Sprintf("%d fire times from %s to %s: %s", c.Count, c.From.Format(time.RFC3339), c.To.Format(time.RFC3339), c.Reason)})
	return applyResult{}
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
		if f.History != nil {
			f.trimmedRuns = append(f.trimmedRuns, r.Clone())
		}
		f.dropRun(r)
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

func (f *FSM) applyComplete(l *raft.Log, version int, c *Completion) applyResult {
	r, a, err := f.attempt(c.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	if !c.State.Terminal() || (version >= vDecideInApply && !c.State.Known()) {
		return applyResult{Err: fmt.Errorf("complete %s: state %q is not terminal: %w", a.ID, c.State, jobs.ErrInvalidConfig)}
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
	switch {
	case a.Expired && strings.HasPrefix(a.Error, ReleasedPrefix) && c.Error != "":
		a.Error += "; the worker reports: " + c.Error // keep who released it, and why
	case c.Error != "" || !a.Expired:
		a.Error = c.Error
	}
	a.StderrTail = c.StderrTail
	if version >= vStdoutTail {
		a.StdoutTail = c.StdoutTail
	}
	if !c.StartedAt.IsZero() && a.StartedAt.IsZero() {
		a.StartedAt = c.StartedAt
	}
	if version >= vBatches && !c.AcceptedAt.IsZero() {
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
	if version >= vNeverStarted && c.NeverStarted && a.State == jobs.Lost && a.StartedAt.IsZero() && !a.Expired && c.Node == a.Worker {
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
	case version < vDecideInApply:
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
	return applyResult{Run: r.Clone()}
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

func (f *FSM) applyExpire(l *raft.Log, version int, e *expireCmd) applyResult {
	r, a, err := f.attempt(e.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	if e.State == jobs.Cancelled && isLatest(r, a) && AwaitsRetry(*r) {
		// A newer run replaces one waiting for its retry: it gets none.
		f.cancel(l, r, e.Reason, e.At)
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
	if st == jobs.Lost && e.NeverStarted && version >= vNeverStarted {
		a.NeverStarted = DecideNeverStarted(*r, *a, f.epochOf(l), f.st.Epoch, f.st.ElectedIndex)
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
	if CountedAttempts(*r) >= f.maxAttempts(r.Job) {
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

// applyNote records what a node saw about an attempt. From version 2
// only known kinds are taken (jobs.NoteKinds), each counted under a fixed
// name; a store_refused note ("<outcome> <key> greatest=<epoch.seq>")
// counts in stale_refused, is kept on the attempt, and fences it if it
// already ended failed as its run's newest attempt. Version 1 counted any
// kind under its own name, and still does for its entries.
func (f *FSM) applyNote(l *raft.Log, version int, n *noteCmd) applyResult {
	r, a, err := f.attempt(n.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	if version < vDecideInApply {
		f.st.Counters[n.Kind]++
		f.event(l, jobs.Event{Time: n.At, Kind: n.Kind, Node: n.Node, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: n.Detail})
		return applyResult{Run: r.Clone()}
	}
	if err := CheckNote(n.Kind, n.Detail); err != nil {
		return applyResult{Run: r.Clone(), Err: err}
	}
	n.Detail = clip(n.Detail, maxAuditDetail)
	switch n.Kind {
	case jobs.EventSuspect:
		f.st.Counters[CounterSuspect]++
	case jobs.EventLost:
		f.st.Counters[CounterLost]++
	case jobs.NoteStoreRefused:
		outcome, rest, _ := strings.Cut(n.Detail, " ")
		key, _, _ := strings.Cut(rest, " ")
		repeated := slices.Contains(a.StoreRefusals, n.Detail)
		// A worker's completion may have counted this very refusal (its
		// own publish of the run's output) before the note came.
		counted := repeated || (a.State.Terminal() && a.StoreOutcome == outcome && key == r.Output)
		if !repeated && len(a.StoreRefusals) < maxStoreRefusals {
			a.StoreRefusals = append(a.StoreRefusals, n.Detail)
		}
		if !counted {
			f.st.Counters[CounterStaleRefused]++
			f.st.Counters[CounterStoreRefused+outcome]++
		}
		f.event(l, jobs.Event{Time: n.At, Kind: n.Kind, Node: n.Node, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: n.Detail})
		if a.State == jobs.Failed && isLatest(r, a) && len(a.StoreRefusals) > 0 {
			// The completion came first: the attempt was fenced all the
			// same, and gets no retry.
			f.fenceByRefusal(a)
			f.settle(r)
			f.st.Counters[CounterFenced]++
			f.event(l, jobs.Event{Time: n.At, Kind: jobs.EventFenced, Node: a.Worker, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token,
				Detail: string(a.State) + ": " + a.Error})
			f.ended(l, r, a)
		}
		return applyResult{Run: r.Clone()}
	}
	f.event(l, jobs.Event{Time: n.At, Kind: n.Kind, Node: n.Node, Job: r.Job, Run: r.ID, Attempt: a.ID, Token: &a.Token, Detail: n.Detail})
	return applyResult{Run: r.Clone()}
}

// CheckNote checks a note's kind and detail: a known kind
// (jobs.NoteKinds), and for jobs.NoteStoreRefused a detail
// "<stale_owner|expired> <key> greatest=<token>" of at most
// maxRefusalDetail bytes (other details are cut to maxAuditDetail bytes
// when applied). It wraps jobs.ErrInvalidConfig.
func CheckNote(kind, detail string) error {
	if !slices.Contains(jobs.NoteKinds, kind) {
		return fmt.Errorf("note of kind %q: want one of %s: %w", clip(kind, maxAuditKind), strings.Join(jobs.NoteKinds, ", "), jobs.ErrInvalidConfig)
	}
	if kind == jobs.NoteStoreRefused {
		if len(detail) > maxRefusalDetail {
			return fmt.Errorf("note %s: detail of %d bytes, at most %d: %w", kind, len(detail), maxRefusalDetail, jobs.ErrInvalidConfig)
		}
		fields := strings.Fields(detail)
		if len(fields) != 3 || !refusedOutcomes[fields[0]] || !strings.HasPrefix(fields[2], "greatest=") || fields[1] == "" {
			return fmt.Errorf("note %s: detail %q: want \"<stale_owner|expired> <key> greatest=<epoch.seq>\": %w", kind, clip(detail, 80), jobs.ErrInvalidConfig)
		}
	}
	return nil
}

// CheckAudit checks an audit entry's kind: one of jobs.AuditKinds (with
// a version 1 entry, any kind the FSM does not record itself).
func CheckAudit(kind string) error {
	if !slices.Contains(jobs.AuditKinds, kind) {
		return fmt.Errorf("audit entry of kind %q: want one of %s: %w", clip(kind, maxAuditKind), strings.Join(jobs.AuditKinds, ", "), jobs.ErrInvalidConfig)
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// applyAudit appends a node's audit entry: a known kind (version 2; a
// version 1 entry took any kind but the FSM's own). The detail is cut to
// maxAuditDetail bytes.
func (f *FSM) applyAudit(l *raft.Log, version int, a *auditCmd) applyResult {
	if a.Kind == "" || len(a.Kind) > maxAuditKind || fsmKinds[a.Kind] {
		return applyResult{Err: fmt.Errorf("audit entry of kind %q: %w", a.Kind, jobs.ErrInvalidConfig)}
	}
	if version >= vDecideInApply {
		if err := CheckAudit(a.Kind); err != nil {
			return applyResult{Err: err}
		}
	}
	if version < vClockSkew && a.Kind == jobs.EventClockSkew {
		return applyResult{Err: fmt.Errorf("audit entry of kind %q in a version %d entry: %w", a.Kind, version, jobs.ErrInvalidConfig)}
	}
	detail := a.Detail
	if len(detail) > maxAuditDetail {
		detail = strings.ToValidUTF8(detail[:maxAuditDetail], "") + "..."
	}
	f.event(l, jobs.Event{Time: a.At, Kind: a.Kind, Node: a.Node, Detail: detail})
	return applyResult{}
}

// Snapshot implements raft.FSM. The snapshot carries LogVersion. A
// halted FSM refuses: its state is older than the index Raft would label
// the snapshot with, and Raft would drop the entries in between.
// With a History, everything trimmed so far is made durable there first:
// the entries that trimmed it are never replayed once the log is
// compacted to this snapshot. (Raft calls Snapshot between applies, so
// nothing is trimmed meanwhile.)
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	snap, _, err := f.snapshot(false)
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// snapshot takes a snapshot and says what it holds, both of one applied
// index. With check, it refuses a state that a restore would refuse
// (checkState).
func (f *FSM) snapshot(check bool) (*stateSnapshot, SnapshotInfo, error) {
	if f.History != nil {
		if err := f.History.Sync(); err != nil {
			return nil, SnapshotInfo{}, fmt.Errorf("no snapshot until the history is durable: %w", err)
		}
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.halted != nil {
		return nil, SnapshotInfo{}, fmt.Errorf("no snapshot: %w", f.halted)
	}
	// Raft takes the snapshot between two entries: Apply waits while
	// this runs. Everything Apply changes in place is encoded now; the
	// job set, most of a large state and never changed in place, is
	// encoded by Persist.
	st := f.st
	st.Version = LogVersion
	if check {
		if err := checkState(&st, time.Time{}); err != nil {
			// Not the request's fault: no ErrInvalidConfig.
			return nil, SnapshotInfo{}, fmt.Errorf("a restore would refuse this state: %v", err)
		}
	}
	info := infoOf(&st)
	set := st.Jobs
	st.Jobs = nil
	// Not HTML-escaped: a tail of "<" or "&" would take six times its
	// size in every snapshot.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(st); err != nil {
		return nil, SnapshotInfo{}, err
	}
	return &stateSnapshot{rest: bytes.TrimSuffix(b.Bytes(), []byte("\n")), jobs: set}, info, nil
}

// stateSnapshot is a snapshot of the state: rest, the state without its
// jobs, already encoded; the jobs are added to it as it is written.
type stateSnapshot struct {
	rest []byte
	jobs []jobs.Spec
}

// Persist writes the state to Raft's sink (writeTo).
func (s *stateSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// writeTo writes the state as one JSON object: rest, with "jobs" added
// as its last field.
func (s *stateSnapshot) writeTo(w io.Writer) error {
	if len(s.jobs) == 0 {
		_, err := w.Write(s.rest)
		return err
	}
	if len(s.rest) < 2 || s.rest[len(s.rest)-1] != '}' {
		return fmt.Errorf("snapshot: state encoded as %.20q", s.rest)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.Write(s.rest[:len(s.rest)-1])
	if len(s.rest) > 2 {
		bw.WriteString(",")
	}
	bw.WriteString(`"jobs":`)
	if err := json.NewEncoder(bw).Encode(s.jobs); err != nil {
		return err
	}
	bw.WriteString("}")
	return bw.Flush()
}

func (s *stateSnapshot) Release() {}

// Restore implements raft.FSM. It refuses a snapshot of a newer format
// than LogVersion (and halts: the node cannot follow this cluster); a
// snapshot without a version is version 1. It refuses, with an error and
// the state unchanged, one it cannot index (checkIndexable), and never
// panics: a panic while taking the state in is returned as an error. A
// snapshot it restores replaces the state whole, halted or not.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st := emptyState()
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if st.Version == 0 {
		st.Version = 1
	}
	if st.Version > LogVersion {
		err := fmt.Errorf("snapshot of log format version %d (up to index %d); this binary reads up to version %d", st.Version, st.LastIndex, LogVersion)
		f.mu.Lock()
		f.halt(&raft.Log{Index: st.LastIndex}, err)
		err = f.halted
		f.mu.Unlock()
		return err
	}
	if err := checkIndexable(&st); err != nil {
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
	if st.LastRuns == nil {
		st.LastRuns = fresh.LastRuns
	}
	if st.GroupQueue == nil {
		st.GroupQueue = fresh.GroupQueue
	}
	if f.History != nil {
		// Before the state is replaced: a history that cannot record
		// what this snapshot skips must not lose track of it.
		if err := f.History.Restored(st.LastIndex); err != nil {
			return fmt.Errorf("restore snapshot: %w", err)
		}
	}
	if err := f.takeIn(st); err != nil {
		return fmt.Errorf("restore snapshot (up to index %d): %w", st.LastIndex, err)
	}
	f.publish([]Change{{Kind: ChangeRestored, Index: st.LastIndex}})
	f.notifySubscribers()
	return nil
}

// takeIn replaces the state with st and indexes it. If that panics, the
// state before it is put back and the panic returned as an error
// (errRestorePanic), logged with its stack.
func (f *FSM) takeIn(st state) (err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, idx, halted := f.st, f.idx, f.halted
	defer func() {
		if p := recover(); p != nil {
			f.st, f.idx, f.halted, f.deps, f.groupsOf = before, idx, halted, nil, ""
			f.logger().Error("restore snapshot: panic while taking the state in; the state before it is kept", "index", st.LastIndex, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", errRestorePanic, p)
		}
	}()
	f.st = st
	f.halted = nil
	f.indexJobs()
	f.indexRuns()
	// A snapshot written before runs waited for their retries as pending
	// (before snapshots carried a version) holds them as failed or lost;
	// settling again gives them their retry. A newer one holds every run
	// as the replicas that applied the log have it: settled again by the
	// job set of now, a run that failed for good before its job was given
	// more retries would become pending here alone.
	if st.Version < vDecideInApply {
		for _, r := range f.st.Runs {
			f.settle(r)
		}
	}
	return nil
}

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

package fsm

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm/feed"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

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

// ApplyResult is what FSM.Apply returns to the proposer.
type ApplyResult struct {
	Run jobs.Run
	Err error
	// Batch is, for a batch grant (OpGrants) or a group of completions
	// (OpCompletes) or starts (OpStarts), each one's own result in the
	// entry's order.
	Batch []ApplyResult
	// Backfill is what a backfill entry decided (backfill.go).
	Backfill *BackfillResult
	// Epoch and Index are an election entry's (startconfirm.go).
	Epoch, Index uint64
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
	st       replicated.State
	idx      jobIndex
	halted   error
	logHalts atomic.Uint64
	// overload is derived from the skips applied (f.mu held).
	overload jobs.Overload
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

	applied   feed.Signals
	changeHub *feed.Hub[Change]
}

// NewFSM returns an empty FSM.
func NewFSM() *FSM {
	f := &FSM{
		MaxRuns:   replicated.DefaultMaxRuns,
		st:        replicated.EmptyState(),
		changeHub: feed.NewHub(maxPendingChanges, Change{Kind: ChangeResync}),
	}
	f.indexJobs(false)
	f.indexRuns()
	return f
}

func (f *FSM) logger() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.Default()
}

var _ raft.FSM = (*FSM)(nil)

// Apply implements raft.FSM. An entry it cannot read halts it (see
// logversion.go): that entry and every later one are answered with an
// error wrapping ErrLogHalted and change nothing. The entry is decoded
// before the lock: readers do not wait on a megabyte of a job set's JSON.
func (f *FSM) Apply(l *raft.Log) any {
	c, err := decodeEntry(l)
	f.mu.Lock()
	if f.halted != nil {
		err := f.halted
		f.mu.Unlock()
		return ApplyResult{Err: err}
	}
	if err != nil {
		f.halt(l, err)
		err = f.halted
		f.mu.Unlock()
		return ApplyResult{Err: err}
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
	f.changeHub.Publish(chs)
	f.applied.Signal()
	return res
}

// applyEntry applies a decoded entry: its op, then what follows it in the
// same entry (afterEntry, promoteWaiters). A panic halts the FSM at the
// entry, as an entry it cannot read does (ok false): every replica meets
// the same panic at the same entry, and one that went on would apply the
// later entries to a state the panic left half-changed. A halted FSM takes
// no snapshot, so after a restart on a fixed binary Raft applies the entry
// again from the last snapshot. f.mu held.
func (f *FSM) applyEntry(l *raft.Log, c replicated.Command) (res ApplyResult, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			f.logger().Error("applying an entry panicked", "index", l.Index, "term", l.Term, "op", c.Op,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			f.halt(l, fmt.Errorf("applying its op %q panicked: %v", c.Op, p))
			f.changes, f.trimmedRuns, f.trimmedEvents = nil, nil, nil
			res, ok = ApplyResult{Err: f.halted}, false
		}
	}()
	res = f.apply(l, c)
	if c.V >= replicated.VersionFollow {
		f.afterEntry(l, c)
	}
	if c.V >= replicated.VersionGroups && len(f.st.GroupQueue) > 0 {
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
func (f *FSM) apply(l *raft.Log, c replicated.Command) ApplyResult {
	o := opsByName[c.Op]
	if err := DecideTermStarted(c.V, o.mintsToken(&c), f.epochOf(l), f.st.Epoch); err != nil {
		return ApplyResult{Err: err} // termstart.go: nothing changes
	}
	return o.apply(f, l, &c)
}

// applyElected records a new leader's first entry: its epoch comes from
// the entry itself.
func (f *FSM) applyElected(l *raft.Log, e *replicated.ElectedCmd) ApplyResult {
	epoch := f.epochOf(l)
	f.st.Epoch, f.st.Leader, f.st.ElectedAt, f.st.ElectedIndex = epoch, e.Node, e.At, l.Index
	f.st.Counters[CounterElections]++
	f.event(l, jobs.Event{Time: e.At, Kind: jobs.EventElected, Node: e.Node, Epoch: epoch,
		Detail: fmt.Sprintf("%s leads in epoch %d", e.Node, epoch)})
	return ApplyResult{Epoch: epoch, Index: l.Index}
}

// applySetJobs replaces the job set.
func (f *FSM) applySetJobs(l *raft.Log, c *replicated.SetJobsCmd) ApplyResult {
	hash := c.Hash
	if hash == "" {
		hash = jobs.HashSpecs(c.Jobs)
	}
	specs := jobs.Addrs(c.Jobs)
	f.replaceJobs(l, specs, specs, false, c.Source, c.At, hash, fmt.Sprintf("%d jobs from %s (hash %s)", len(c.Jobs), c.Source, hash))
	return ApplyResult{}
}

// replaceJobs makes specs, of hash, the job set, and records it with
// detail; sameNames: specs hold the set's names where it had them. The
// jobs of specs not in news were the set's before.
func (f *FSM) replaceJobs(l *raft.Log, specs, news []*jobs.Spec, sameNames bool, source string, at time.Time, hash, detail string) {
	f.st.Jobs, f.st.JobsFrom, f.st.JobsAt, f.st.HasJobs = specs, source, at, true
	f.st.JobsHash = hash
	// A difference still arriving was against the set replaced here.
	f.st.JobsStage = nil
	f.indexJobs(sameNames)
	f.pruneJobStats()
	f.dropBackfills()
	// A job new to the cluster starts from now, not from the epoch. Once
	// every job has a time (none is deleted), only news can lack one.
	if !f.idx.allScheduled {
		news = specs
	}
	for _, s := range news {
		if _, ok := f.st.LastScheduled[s.Name]; !ok {
			f.st.LastScheduled[s.Name] = at
		}
	}
	f.idx.allScheduled = true
	// A run waiting for a retry its job no longer allows (removed, or
	// fewer retries) has finished.
	for _, id := range f.st.Order {
		if r := f.st.Runs[id]; AwaitsRetry(*r) {
			if f.settle(r); r.State != jobs.Pending {
				f.event(l, jobs.Event{Time: at, Kind: jobs.EventCancelled, Job: r.Job, Run: r.ID,
					Detail: fmt.Sprintf("no retry: the new job set allows none; the run ends %s", r.State)})
				a, _ := r.Latest()
				f.ended(l, r, a)
			}
		}
	}
	f.event(l, jobs.Event{Time: at, Kind: jobs.EventJobSet, Detail: detail})
	f.changed(l, Change{Kind: ChangeJobs})
}

// event appends to the bounded audit trail.
func (f *FSM) event(l *raft.Log, e jobs.Event) {
	f.st.EventSeq++
	e.Seq, e.Index = f.st.EventSeq, l.Index
	limit := f.MaxEvents
	if limit <= 0 {
		limit = replicated.MaxEvents
	}
	if len(f.st.Events) == cap(f.st.Events) {
		// Room for limit more, so the live events are copied once per
		// limit appended. append's own growth, a quarter at this size,
		// copied all 2000 every 700 events (three a run), and allocated
		// half as much again. More room gained nothing measurable: the
		// collector scans the whole array.
		f.st.Events = slices.Grow(f.st.Events, limit)
	}
	f.st.Events = append(f.st.Events, e)
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
	return *f.st.Jobs[i], true
}

// Subscribe returns a channel signalled, coalesced, after every applied
// entry, and a function that ends the subscription.
func (f *FSM) Subscribe() (<-chan struct{}, func()) { return f.applied.Subscribe() }

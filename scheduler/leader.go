package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/runtrace"
	"github.com/fencecron/fencecron/scheduler/worker"
)

const (
	// maxEnumerate bounds how many missed fire times one pass walks.
	maxEnumerate = 100000
	// leaseTick is how often the leader looks for expired leases and due
	// retries.
	leaseTick = 100 * time.Millisecond
)

// leader is one leadership term of a node: its firing queue, the leases of
// running attempts (renewals live only here; grants, expiries and
// completions are Raft entries), retry timers and dispatches in flight.
// Everything here dies with the term.
type leader struct {
	s   *Scheduler
	ctx context.Context
	log *slog.Logger

	mu       sync.Mutex
	leases   map[string]*lease    // attempt id -> lease
	retryAt  map[string]time.Time // run id -> when its next attempt is due
	inflight map[string]bool      // attempts being dispatched
	// dispatching are the "dispatched" spans of attempts being
	// dispatched, while tracing is on (runtrace).
	dispatching map[string]*runtrace.Span
	// unstarted are the attempts being expired as never started: their
	// start is no longer confirmed (startconfirm.go).
	unstarted map[string]bool
	// goneAt is when a dispatch to a worker last showed it gone
	// (workerGone), by goneClock (the real one; a test's own): it is
	// chosen last until goneFor has passed or it is heard from (shunned).
	goneAt    map[string]time.Time
	goneClock jobs.Clock
	// electedEpoch and electedIndex are this loop's election entry's: it
	// confirms starts only while that entry is the last one applied.
	electedEpoch, electedIndex uint64
	pumping                    atomic.Bool // pumpBackfills is granting (backfill.go)
	// schedules are the parsed schedules of the firing queue's jobs
	// (queueFor); only the firing loop uses them.
	schedules map[schedKey]*jobs.Schedule
	// sender is the term's notification delivery (notifier.go, scheduler/notify), set
	// before the term is published.
	sender notifier

	// completions and starts wait here for their groups' entries
	// (groupcommit.go).
	completions *grouper[replicated.Completion]
	starts      *grouper[replicated.StartCmd]

	// endTerm ends the loop (set by run before anything proposes); see
	// propose.
	endTerm func()
	ended   atomic.Bool

	wg sync.WaitGroup
}

func newLeader(s *Scheduler, ctx context.Context) *leader {
	l := &leader{
		s: s, ctx: ctx, log: s.Logger,
		leases: map[string]*lease{}, retryAt: map[string]time.Time{}, inflight: map[string]bool{}, dispatching: map[string]*runtrace.Span{}, unstarted: map[string]bool{}, goneAt: map[string]time.Time{}, goneClock: jobs.SystemClock{},
	}
	l.completions = newGrouper(completionBytes, l.commitCompletions)
	l.starts = newGrouper(startBytes, l.commitStarts)
	return l
}

// run is the leader loop: commit the election entry, recover open
// attempts, catch up on missed fire times, then fire from a min-heap of
// next fire times and keep leases until ctx ends.
func (l *leader) run() {
	defer l.wg.Wait()
	// The term's goroutines (the groupers' committers) end with it, also when
	// the loop ends on its own (an operator's restore), not only when
	// the scheduler cancels it: cancel runs before the Wait above.
	termCtx, cancel := context.WithCancel(l.ctx)
	defer cancel()
	l.ctx, l.endTerm = termCtx, cancel
	ctx, s := l.ctx, l.s
	if err := s.Raft.Barrier(ctx); err != nil {
		l.log.Warn("barrier failed; not leading", "err", err)
		return
	}
	res, err := s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: s.Raft.ID(), At: s.now()}})
	if err != nil {
		l.log.Warn("could not commit election entry; not leading", "err", err)
		return
	}
	l.electedEpoch, l.electedIndex = res.Epoch, res.Index
	l.log.Info("leading", "node", s.Raft.ID(), "epoch", l.electedEpoch)
	if _, _, _, has := s.FSM.JobSet(); s.InitialJobs != nil && (!has || s.ReplaceJobs && s.FSM.JobSetInfo().Hash != jobs.HashSpecs(s.InitialJobs)) {
		// SetJobs normalizes what it is given, and the agent reads
		// InitialJobs too (its config hash).
		if _, err := s.SetJobs(ctx, slices.Clone(s.InitialJobs), s.InitialSource, nil); err != nil {
			l.log.Error("could not apply the initial job set", "source", s.InitialSource, "err", err)
		} else {
			l.log.Info("applied the initial job set", "source", s.InitialSource, "jobs", len(s.InitialJobs))
		}
	}

	// Subscribe before recovering: whatever ends meanwhile is handled
	// again, which is harmless.
	feed := s.FSM.Changes()
	defer feed.Close()
	for range committers {
		l.wg.Go(func() { l.completions.run(l.ctx) })
		l.wg.Go(func() { l.starts.run(l.ctx) })
	}
	l.startNotifying()
	s.term.Store(l)
	defer s.term.CompareAndSwap(l, nil)
	l.recover()

	q := l.buildQueue()
	tick := time.NewTicker(leaseTick)
	defer tick.Stop()
	for {
		wait := time.Hour
		if len(q) > 0 {
			wait = max(q[0].wakeAt().Sub(s.Clock.Now()), 0)
		}
		t := s.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			l.fireDue(&q)
		case <-feed.Ready():
			chs := feed.Take()
			if restored(chs) {
				// An operator's restore replaced the state this term
				// built on: end the term; the scheduler starts a new one
				// if this node still leads (election entry, recovery,
				// catch-up), in the epoch of the restored base.
				l.log.Warn("the replicated state was restored from a snapshot: starting a new epoch")
				t.Stop()
				return
			}
			switch jobsChanged, resynced := l.onChanges(chs); {
			case resynced:
				q = l.buildQueue()
			case jobsChanged:
				q = l.refreshQueue(q)
			}
		case <-tick.C:
			l.checkLeases()
			l.checkRetries()
			l.pumpBackfills()
		}
		t.Stop()
	}
}

// onChanges acts on what the FSM applied: an ended attempt loses its
// lease, and its run, if it waits for a retry, gets a retry timer; after
// a resync (a restored snapshot, or changes dropped because this loop
// fell behind) it looks at every run again. It reports whether the job
// set changed, so the firing queue must be brought up to date, or it
// resynced, so the queue must be built afresh.
func (l *leader) onChanges(chs []fsm.Change) (jobsChanged, resynced bool) {
	for _, ch := range chs {
		switch ch.Kind {
		case fsm.ChangeJobs:
			jobsChanged = true
		case fsm.ChangeResync, fsm.ChangeRestored:
			resynced = true
			l.resync()
			l.trackFollowers()
		case fsm.ChangeGranted:
			l.trackFollower(ch)
		case fsm.ChangeAdmitted:
			if run, ok := l.s.FSM.Run(ch.Run); ok {
				l.scheduleRetry(run) // grants its first attempt (groups.go)
			}
		case fsm.ChangeEnded:
			l.mu.Lock()
			delete(l.leases, ch.Attempt)
			delete(l.unstarted, ch.Attempt)
			l.mu.Unlock()
			if run, ok := l.s.FSM.Run(ch.Run); ok {
				l.scheduleRetry(run)
			}
		}
	}
	return jobsChanged, resynced
}

// restored reports whether chs hold an operator's restore.
func restored(chs []fsm.Change) bool {
	for _, ch := range chs {
		if ch.Kind == fsm.ChangeRestored {
			return true
		}
	}
	return false
}

// resync drops the leases of attempts that are no longer current and sets
// the retry timer of every run that waits for one.
func (l *leader) resync() {
	l.mu.Lock()
	ids := make([]string, 0, len(l.leases))
	for id := range l.leases {
		ids = append(ids, id)
	}
	for id := range l.unstarted {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	for _, id := range ids {
		if _, _, ok := l.current(id); !ok {
			l.mu.Lock()
			delete(l.leases, id)
			delete(l.unstarted, id)
			l.mu.Unlock()
		}
	}
	l.scheduleRetries()
}

// scheduleRetry sets the retry timer of a run whose latest attempt failed
// and which has attempts left: the backoff doubles with each attempt.
func (l *leader) scheduleRetry(run jobs.Run) {
	if fsm.IsAdmitted(run) {
		l.mu.Lock()
		l.retryAt[run.ID] = l.s.Clock.Now()
		l.mu.Unlock()
		return
	}
	a, _ := run.Latest()
	if !fsm.AwaitsRetry(run) {
		return
	}
	spec, ok := l.s.FSM.Spec(run.Job)
	if !ok {
		return
	}
	backoff := spec.RetryDelay(a.Number)
	if a.Expired && a.State == jobs.Lost || a.NeverStarted {
		backoff = 0 // a takeover, or a run that never started, does not wait
	}
	l.mu.Lock()
	l.retryAt[run.ID] = a.EndedAt.Add(backoff)
	l.mu.Unlock()
}

func (l *leader) scheduleRetries() {
	for _, r := range l.s.FSM.Runs(fsm.RunFilter{}) {
		l.scheduleRetry(r)
	}
}

// checkRetries grants the next attempt of every run whose retry is due.
func (l *leader) checkRetries() {
	now := l.s.Clock.Now()
	l.mu.Lock()
	due := map[string]time.Time{}
	for id, at := range l.retryAt {
		if !at.After(now) {
			due[id] = at
			delete(l.retryAt, id)
		}
	}
	l.mu.Unlock()
	for _, id := range sortedKeys(due) {
		run, ok := l.s.FSM.Run(id)
		if !ok {
			continue
		}
		if fsm.IsAdmitted(run) {
			l.grantAdmitted(run, now)
			continue
		}
		a, _ := run.Latest()
		spec, known := l.s.FSM.Spec(run.Job)
		if !known || !fsm.AwaitsRetry(run) {
			continue
		}
		picked, err := l.chooseWorker(spec, run.ID, a.Worker)
		if err != nil {
			l.log.Warn("no worker for retry; trying again later", jobs.LogRunID, run.ID, "why", err)
			l.mu.Lock()
			l.retryAt[run.ID] = now.Add(time.Second)
			l.mu.Unlock()
			continue
		}
		res, err := l.propose(replicated.Command{Op: replicated.OpRetry, Retry: &replicated.RetryCmd{Run: run.ID, After: a.Number, Worker: picked, At: l.s.now()}})
		if err != nil {
			if !errors.Is(err, jobs.ErrStaleAttempt) && !errors.Is(err, jobs.ErrRunFinished) {
				// The run still waits: try again, or it stays open for good.
				l.log.Error("retry failed; trying again later", jobs.LogRunID, run.ID, "err", err)
				l.mu.Lock()
				l.retryAt[run.ID] = now.Add(time.Second)
				l.mu.Unlock()
			}
			continue
		}
		next, _ := res.Run.Latest()
		l.log.Info("retrying", next.LogArgs("worker", next.Worker)...)
		l.track(res.Run, *next, spec)
	}
}

func sortedKeys(m map[string]time.Time) []string {
	keys := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// recover takes over what earlier leaders left: every open attempt gets a
// fresh lease from this election (as Consul and Chubby do; the short one
// before the start for an attempt granted ahead that the log shows
// nobody let start, recoveredLease) and is
// dispatched again if it may never have arrived (the worker ignores a
// duplicate); attempts whose worker gossip reports gone are expired at
// once; failed runs get their retry timers.
func (l *leader) recover() {
	// Only a worker gossip has seen die or leave is gone: a leader that
	// has just started may not have heard of everyone yet, and a live
	// worker's lease deserves its grace.
	gone := map[string]bool{}
	for _, m := range l.s.Raft.Members() {
		if m.State == "dead" || m.State == "left" {
			gone[m.Name] = true
		}
	}
	now := l.s.Clock.Now()
	for _, run := range l.s.FSM.OpenRuns("") {
		a, ok := run.Latest()
		if !ok || fsm.AwaitsRetry(run) {
			continue // scheduleRetries takes these
		}
		spec, known := l.s.FSM.Spec(run.Job)
		if gone[a.Worker] || !known {
			// Granted ahead, and the log says nobody let it start: it
			// never started (scheduler/fsm/prestart.go).
			unconfirmed := a.State == jobs.Pending && a.StartInLog && !a.StartConfirmed
			l.expireAttempt(run, *a, jobs.Lost, fmt.Sprintf("worker %s is gone (found by the new leader)", a.Worker), expiry{takeover: true, neverStarted: unconfirmed})
			continue
		}
		le := recoveredLease(run, *a, spec, now)
		l.mu.Lock()
		if l.leases[a.ID] == nil { // a renewal that came first made it from a newer read
			l.leases[a.ID] = le
		}
		l.mu.Unlock()
		if a.State == jobs.Pending {
			l.dispatch(worker.Assignment{Run: run, Attempt: *a, Spec: spec})
		}
	}
	l.scheduleRetries()
}

// propose proposes c, an entry that may mint a token, in this loop's
// context. The FSM refuses it (ErrTermNotStarted) when this node leads a
// term whose election entry is not in the log: the node lost and
// regained leadership while this loop ran, so the loop belongs to a term
// it did not start. The loop then ends, and the scheduler starts a fresh
// one if the node still leads (as after a restore), which commits the
// term's election entry before it grants. The error then also says
// jobs.ErrNotLeader, so an operator's trigger is answered "retry".
func (l *leader) propose(c replicated.Command) (fsm.ApplyResult, error) {
	return l.proposeWith(l.ctx, c)
}

// proposeWith is propose for a proposal made on behalf of a caller whose
// ctx bounds it (an operator's release).
func (l *leader) proposeWith(ctx context.Context, c replicated.Command) (fsm.ApplyResult, error) {
	res, err := l.s.applyLocalCmd(ctx, c)
	if !errors.Is(err, fsm.ErrTermNotStarted) {
		return res, err
	}
	if l.ended.CompareAndSwap(false, true) {
		l.log.Warn("this leader loop's proposal was refused: it leads a term it did not start; ending the loop so a new one starts the term", "op", c.Op, "err", err)
		l.endTerm()
	}
	return res, fmt.Errorf("%w: this node's leader loop is starting its term again; retry: %w", jobs.ErrNotLeader, err)
}

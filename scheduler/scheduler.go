// Package scheduler is the leader and the node's glue: a leader's term
// (its firing loop, granting ahead, lease table, retries and the group
// commits of completions and starts), and Scheduler, which answers as the
// leader or forwards to it. The replicated state machine that grants runs
// and mints fence tokens is package fsm; the worker that runs what it is
// granted is package worker; notification delivery is package notify.
//
// The replicated log decides. Whatever must hold on every replica (a
// (job, scheduled time) granted once, a job's overlap policy, which
// attempt a retry follows) is decided inside FSM.Apply from the
// replicated state, by pure functions such as fsm.DecideGrant, never by
// the leader reading the state and then proposing: proposals made at once
// (the leader fires many jobs in parallel, triggers arrive at every node)
// are then ordered by the log and decided one after the other. Entries
// are versioned (replicated/versions.go), so servers of two releases never apply
// the same entry differently. The leader re-validates whatever other
// nodes ask of it (Forwarder, Scheduler.Local) before it proposes it, and
// learns what it must act on (ended attempts, a new job set) from the
// FSM's typed changes (FSM.Changes).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/notify"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/runtrace"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// Raft is what the scheduler needs from the coordination plane
// (election.Node implements it).
type Raft interface {
	ID() string
	IsLeader() bool
	// LeadershipChanged is signalled when leadership may have changed.
	LeadershipChanged() <-chan struct{}
	// Apply replicates cmd and returns the FSM's response. It fails on a
	// follower; an ErrLeadershipLost-style error, or ctx's end before the
	// answer, leaves the outcome unknown: a caller that must know waits
	// on a context its asker cannot cancel (Release).
	Apply(ctx context.Context, cmd []byte) (any, error)
	Barrier(ctx context.Context) error
	// Members lists the nodes gossip knows, to choose workers from.
	Members() []election.Member
}

// Dispatcher delivers assignments to the named worker. Delivering the
// same attempt twice must start it at most once. It is safe for
// concurrent use.
type Dispatcher interface {
	// Dispatch delivers one assignment.
	Dispatch(ctx context.Context, workerID string, a worker.Assignment) error
	// DispatchMany delivers several assignments (at most 64) in one call:
	// the runs granted in one entry for one instant reach each worker in
	// one request instead of one each (at hundreds of fires a second,
	// that request is most of what a run costs the leader). An error
	// says nothing about which assignments arrived: the leader then
	// dispatches each on its own (Dispatch), which the worker answers for
	// a duplicate without starting anything.
	DispatchMany(ctx context.Context, workerID string, as []worker.Assignment) error
}

// Scheduler fires jobs while its node leads, keeps the leases of running
// attempts, and records what workers report. Create with New, then Open
// and Close.
type Scheduler struct {
	Raft       Raft
	FSM        *fsm.FSM
	Dispatcher Dispatcher
	// Forwarder, if set, carries requests to the leader from a follower.
	Forwarder Forwarder
	// MaxBodyBytes, if positive, is the store's body cap: the leader
	// refuses a job whose max_output_bytes is larger (jobs.Limits).
	MaxBodyBytes int64
	Clock        jobs.Clock
	Logger       *slog.Logger
	// Tracer, if set, makes the leader's spans of every run it grants
	// (fired, granted, dispatched); nil: tracing off.
	Tracer *runtrace.Tracer
	// InitialJobs, if set, is applied when this node leads a cluster that
	// has no job set yet; InitialSource says where it came from.
	InitialJobs   []jobs.Spec
	InitialSource string
	// ReplaceJobs applies InitialJobs also over a job set that differs
	// from it (fencecron dev -jobs: the file as it is now).
	ReplaceJobs bool
	// Notify is how this node sends notifications while it leads
	// (package notify).
	Notify notify.Config
	// Store is the fenced store, where a forced release raises its job's
	// floor (Release); nil: a release raises none, and says so.
	Store fencedstore.Store

	ctx          context.Context
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	term         atomic.Pointer[leader] // set while this node leads
	lastStepDown time.Time              // watch's own
	// setJobs lets one job set apply at a time on the leader: the FSM
	// stages the parts of one large difference at a time, and two
	// interleaved would each undo the other's stage.
	setJobs sync.Mutex
	// checked is the job set this process last checked whole and
	// replicated as it checked it (guarded by setJobs).
	checked checkedSet
	hasher  setHasher // the leader's, under setJobs
	// newNotifier, if set, makes each term's notifier instead of
	// termNotifier's notify.Sender (tests).
	newNotifier func() notifier
}

// New returns a scheduler; Dispatcher must be set before Open.
func New(r Raft, sm *fsm.FSM) *Scheduler {
	return &Scheduler{Raft: r, FSM: sm, Clock: jobs.SystemClock{}, Logger: slog.Default()}
}

// Open starts watching leadership.
func (s *Scheduler) Open() error {
	if s.Dispatcher == nil {
		return errors.New("scheduler: no dispatcher")
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.watch()
	return nil
}

// Close stops firing and waits for the leader loop and its dispatches.
func (s *Scheduler) Close(ctx context.Context) error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("scheduler close: %w", ctx.Err())
	}
}

// watch runs the leader loop exactly while this node leads; the loop's
// context is cancelled the moment leadership is lost.
func (s *Scheduler) watch() {
	defer s.wg.Done()
	var term *leaderTerm // non-nil while the leader loop runs
	stop := func() {
		if term != nil {
			term.cancel()
			<-term.done
			term = nil
		}
	}
	defer stop()
	check := time.NewTicker(250 * time.Millisecond) // LeadershipChanged can coalesce; re-check cheaply
	defer check.Stop()
	for {
		switch isLeader := s.Raft.IsLeader(); {
		case isLeader && term == nil && s.FSM.Halted() != nil:
			s.stepDown()
		case isLeader && term == nil:
			term = s.startLeading()
		case !isLeader && term != nil:
			s.Logger.Info("lost leadership: stopped firing and cancelled dispatches")
			stop()
		}
		var ended <-chan struct{}
		if term != nil {
			ended = term.done
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.Raft.LeadershipChanged():
		case <-check.C:
		case <-ended:
			// The loop ended on its own (it could not commit its election
			// entry); try again on the next tick if still leader.
			stop()
			select {
			case <-check.C:
			case <-s.ctx.Done():
				return
			}
		}
	}
}

// stepDown hands leadership away from a node whose FSM halted (see
// logversion.go): it cannot apply what it would propose, so it must not
// lead. It tries at most every stepDownEvery.
func (s *Scheduler) stepDown() {
	if now := time.Now(); now.Sub(s.lastStepDown) >= stepDownEvery {
		s.lastStepDown = now
		err := s.FSM.Halted()
		t, ok := s.Raft.(interface{ TransferLeadership() error })
		if !ok {
			s.Logger.Error("this node leads but its replicated log is halted; it cannot hand leadership away", "err", err)
			return
		}
		s.Logger.Error("this node leads but its replicated log is halted: handing leadership to another server", "err", err)
		if terr := t.TransferLeadership(); terr != nil {
			s.Logger.Warn("leadership transfer failed; trying again", "err", terr, "in", stepDownEvery)
		}
	}
}

const stepDownEvery = 5 * time.Second

// maxEntryBytes bounds one Raft entry: the largest is a job set
// (jobs.MaxSetBytes) with its envelope. Every replica holds an entry
// whole in memory while it applies it, and a follower receives it in one
// AppendEntries, so nothing larger is proposed.
const maxEntryBytes = jobs.MaxSetBytes + 1<<20

// leaderTerm is one run of the leader loop.
type leaderTerm struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Scheduler) startLeading() *leaderTerm {
	ctx, cancel := context.WithCancel(s.ctx)
	t := &leaderTerm{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		l := newLeader(s, ctx)
		l.run()
	}()
	return t
}

// applyLocalCmd proposes c to this node's Raft, as an entry of this
// binary's log version, and unwraps the FSM's answer.
func (s *Scheduler) applyLocalCmd(ctx context.Context, c replicated.Command) (fsm.ApplyResult, error) {
	b, err := fsm.EncodeEntry(c)
	if err != nil {
		return fsm.ApplyResult{}, err
	}
	if len(b) > maxEntryBytes {
		return fsm.ApplyResult{}, fmt.Errorf("%s entry of %d bytes: a log entry is at most %d MiB: %w", c.Op, len(b), maxEntryBytes>>20, jobs.ErrInvalidConfig)
	}
	resp, err := s.Raft.Apply(ctx, b)
	if err != nil {
		return fsm.ApplyResult{}, err
	}
	res, ok := resp.(fsm.ApplyResult)
	if !ok {
		return fsm.ApplyResult{}, fmt.Errorf("unexpected FSM response %T", resp)
	}
	return res, res.Err
}

// answersHere reports whether this node answers a leader's call itself:
// its own leader loop runs (term), Raft says it leads, or it has no one
// to forward to.
func (s *Scheduler) answersHere() bool {
	return s.term.Load() != nil || s.Forwarder == nil || s.Raft.IsLeader()
}

// toLeader returns who answers a call: this node when it leads (or has no
// Forwarder, and so fails with ErrNotLeader if it does not), the leader
// through Forwarder otherwise.
func (s *Scheduler) toLeader() Forwarder {
	if s.Raft.IsLeader() || s.Forwarder == nil {
		return s.Local()
	}
	return s.Forwarder
}

// SetJobs replicates a new job set, after the leader checked it as a
// whole (CheckJobs): an invalid set changes nothing. A scope (namespace
// globs) limits it to the jobs of those namespaces. It returns the set's
// hash. The caller hands specs over: a leader normalizes them in place.
func (s *Scheduler) SetJobs(ctx context.Context, specs []jobs.Spec, source string, scope []string) (string, error) {
	return s.toLeader().SetJobs(ctx, specs, source, scope)
}

// SetJobsKnown is SetJobs for a set some of whose jobs are jobs of the
// replicated set, sent again as it holds them (an apply by digest): on
// the leader, those are neither checked on their own nor compared again.
// A follower forwards the set as SetJobs does.
func (s *Scheduler) SetJobsKnown(ctx context.Context, specs []jobs.Spec, known KnownJobs, source string, scope []string) (string, error) {
	if l, ok := s.toLeader().(local); ok {
		return l.setJobsKnown(ctx, specs, known, source, scope)
	}
	return s.Forwarder.SetJobs(ctx, specs, source, scope)
}

// Started records that a worker began an attempt.
func (s *Scheduler) Started(ctx context.Context, attempt string, at time.Time) error {
	return s.toLeader().Started(ctx, attempt, at)
}

// Complete records how an attempt ended. Completing twice is harmless, and
// a completion of an attempt that was superseded touches only that one.
func (s *Scheduler) Complete(ctx context.Context, c replicated.Completion) error {
	return s.toLeader().Complete(ctx, c)
}

// Note records what a node saw about an attempt: SUSPECT, LOST, or a
// write the store refused (jobs.NoteKinds).
func (s *Scheduler) Note(ctx context.Context, attempt, kind, node, detail string) error {
	return s.toLeader().Note(ctx, attempt, kind, node, detail)
}

// Audit records an entry of the given kind (jobs.AuditKinds, such as
// jobs.EventLoginFailed) that node saw, in the replicated audit trail.
// Callers bound how often they call it: each call is a Raft entry.
func (s *Scheduler) Audit(ctx context.Context, kind, node, detail string) error {
	return s.toLeader().Audit(ctx, kind, node, detail)
}

// Pause pauses or resumes a job through Raft.
func (s *Scheduler) Pause(ctx context.Context, job string, paused bool) error {
	return s.toLeader().Pause(ctx, job, paused)
}

// Trigger starts a run of job now, on the leader, under the job's overlap
// policy; force overrides it (and is recorded in the audit trail).
func (s *Scheduler) Trigger(ctx context.Context, job string, force bool) (jobs.Run, error) {
	return s.TriggerAt(ctx, job, force, s.now())
}

// TriggerAt starts a run of job as asked at at (see Forwarder.TriggerAt),
// on the leader.
func (s *Scheduler) TriggerAt(ctx context.Context, job string, force bool, at time.Time) (jobs.Run, error) {
	if s.answersHere() {
		return s.Local().TriggerAt(ctx, job, force, at)
	}
	return s.Forwarder.TriggerAt(ctx, job, force, at)
}

// Renew renews the lease of an attempt for the worker node, on the leader.
func (s *Scheduler) Renew(ctx context.Context, attempt, node string) (worker.RenewReply, error) {
	if s.answersHere() {
		return s.Local().Renew(ctx, attempt, node)
	}
	return s.Forwarder.Renew(ctx, attempt, node)
}

func (s *Scheduler) now() time.Time { return s.Clock.Now().UTC() }

// Package scheduler is the only package that knows both leadership and
// jobs: the replicated FSM that grants runs and mints fence tokens, the
// leader's firing loop, and the worker that runs what it is granted.
package scheduler

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Raft is what the scheduler needs from the coordination plane
// (election.Node implements it).
type Raft interface {
	ID() string
	IsLeader() bool
	// LeadershipChanged is signalled when leadership may have changed.
	LeadershipChanged() <-chan struct{}
	// Apply replicates cmd and returns the FSM's response. It fails on a
	// follower; an ErrLeadershipLost-style error leaves the outcome
	// unknown.
	Apply(ctx context.Context, cmd []byte) (any, error)
	Barrier(ctx context.Context) error
}

// Assignment is what the leader hands a worker: one attempt of one run.
type Assignment struct {
	Run     jobs.Run     `json:"run"`
	Attempt jobs.Attempt `json:"attempt"`
	Spec    jobs.Spec    `json:"spec"`
}

// Dispatcher delivers an assignment to the named worker. Delivering the
// same attempt twice must start it at most once.
type Dispatcher interface {
	Dispatch(ctx context.Context, worker string, a Assignment) error
}

// Scheduler fires jobs while its node leads, and records what workers
// report. Create with New, then Open and Close.
type Scheduler struct {
	Raft       Raft
	FSM        *FSM
	Dispatcher Dispatcher
	// Forwarder, if set, carries commands to the leader from a follower.
	Forwarder Forwarder
	Clock     jobs.Clock
	Logger    *slog.Logger
	// InitialJobs, if set, is applied when this node leads a cluster that
	// has no job set yet; InitialSource says where it came from.
	InitialJobs   []jobs.Spec
	InitialSource string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a scheduler; Dispatcher must be set before Open.
func New(r Raft, fsm *FSM) *Scheduler {
	return &Scheduler{Raft: r, FSM: fsm, Clock: jobs.SystemClock{}, Logger: slog.Default()}
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
	check := time.NewTicker(time.Second) // LeadershipChanged can coalesce; re-check cheaply
	defer check.Stop()
	for {
		switch isLeader := s.Raft.IsLeader(); {
		case isLeader && term == nil:
			term = s.startLeading()
		case !isLeader && term != nil:
			s.Logger.Info("lost leadership: stopped firing")
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

// leaderTerm is one run of the leader loop.
type leaderTerm struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Scheduler) startLeading() *leaderTerm {
	ctx, cancel := context.WithCancel(s.ctx)
	t := &leaderTerm{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(t.done); s.lead(ctx) }()
	return t
}

// lead is the leader loop: commit the election entry, then fire jobs from a
// min-heap of next fire times until ctx ends.
func (s *Scheduler) lead(ctx context.Context) {
	var dispatches sync.WaitGroup
	defer dispatches.Wait()
	if err := s.Raft.Barrier(ctx); err != nil {
		s.Logger.Warn("barrier failed; not leading", "err", err)
		return
	}
	if _, err := s.apply(ctx, command{Op: opElected, Elected: &electedCmd{Node: s.Raft.ID(), At: s.Clock.Now().UTC()}}); err != nil {
		s.Logger.Warn("could not commit election entry; not leading", "err", err)
		return
	}
	epoch, _ := s.FSM.Epoch()
	s.Logger.Info("leading: firing jobs", "node", s.Raft.ID(), "epoch", epoch)
	if _, _, _, ok := s.FSM.JobSet(); !ok && s.InitialJobs != nil {
		if _, err := s.SetJobs(ctx, s.InitialJobs, s.InitialSource); err != nil {
			s.Logger.Error("could not apply the initial job set", "source", s.InitialSource, "err", err)
		} else {
			s.Logger.Info("applied the initial job set", "source", s.InitialSource, "jobs", len(s.InitialJobs))
		}
	}

	q := s.buildQueue(s.Clock.Now())
	for {
		var wait time.Duration = time.Hour
		if len(q) > 0 {
			wait = max(q[0].at.Sub(s.Clock.Now()), 0)
		}
		t := s.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.FSM.JobsChanged():
			t.Stop()
			q = s.buildQueue(s.Clock.Now())
		case <-t.C():
			now := s.Clock.Now()
			for len(q) > 0 && !q[0].at.After(now) {
				e := q[0]
				// Fire only the latest time that is due; a late loop
				// does not fire a burst of old times.
				at := e.at
				for n := e.sched.Next(at); !n.IsZero() && !n.After(now); n = e.sched.Next(at) {
					at = n
				}
				s.fire(ctx, &dispatches, e.spec, at, "schedule")
				e.at = e.sched.Next(at)
				if e.at.IsZero() {
					heap.Pop(&q)
				} else {
					heap.Fix(&q, 0)
				}
			}
		}
	}
}

// buildQueue computes each job's next fire time after now.
func (s *Scheduler) buildQueue(now time.Time) fireQueue {
	specs, _, _, _ := s.FSM.JobSet()
	var q fireQueue
	for _, spec := range specs {
		sched, err := spec.Schedule()
		if err != nil {
			s.Logger.Error("job has a bad schedule; not firing it", "job", spec.Name, "err", err)
			continue
		}
		if next := sched.Next(now); !next.IsZero() {
			q = append(q, &fireEntry{at: next, spec: spec, sched: sched})
		}
	}
	heap.Init(&q)
	return q
}

// fire grants a run of spec for scheduled time at and dispatches it.
func (s *Scheduler) fire(ctx context.Context, dispatches *sync.WaitGroup, spec jobs.Spec, at time.Time, trigger string) {
	log := s.Logger.With("job", spec.Name, "scheduled_at", at)
	if spec.Paused {
		return
	}
	g := &grantCmd{Job: spec.Name, ScheduledAt: at.UTC(), Trigger: trigger, At: s.Clock.Now().UTC()}
	op := opGrant
	if spec.Overlap != jobs.OverlapAllow && len(s.FSM.OpenRuns(spec.Name)) > 0 {
		op, g.Reason = opSkip, "previous run still open (overlap: forbid)"
	}
	key, err := spec.OutputKey(at)
	if err != nil {
		op, g.Reason = opSkip, err.Error()
	}
	g.Output = key
	g.Worker = s.Raft.ID()
	res, err := s.apply(ctx, command{Op: op, Grant: g})
	switch {
	case errors.Is(err, jobs.ErrDuplicateRun):
		log.Info("run already granted", "run", res.Run.ID)
		return
	case err != nil:
		log.Error("grant failed", "err", err)
		return
	case op == opSkip:
		log.Info("run skipped", "run", res.Run.ID, "reason", g.Reason)
		return
	}
	att, _ := res.Run.Latest()
	log.Info("granted", "run", res.Run.ID, "attempt", att.ID, "token", att.Token, "worker", att.Worker)
	a := Assignment{Run: res.Run, Attempt: *att, Spec: spec}
	dispatches.Add(1)
	go func() {
		defer dispatches.Done()
		if err := s.Dispatcher.Dispatch(ctx, att.Worker, a); err != nil {
			log.Error("dispatch failed", "attempt", att.ID, "err", err)
		}
	}()
}

// apply proposes c, forwarding it to the leader when this node does not
// lead and c may be forwarded, and unwraps the FSM's answer.
func (s *Scheduler) apply(ctx context.Context, c command) (applyResult, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return applyResult{}, err
	}
	if !s.Raft.IsLeader() && s.Forwarder != nil && forwardable[c.Op] {
		w, err := s.Forwarder.Forward(ctx, b)
		if err != nil {
			return applyResult{}, fmt.Errorf("forward %s to the leader: %w", c.Op, err)
		}
		return fromWire(w)
	}
	return s.applyLocal(ctx, b)
}

// applyLocal proposes an encoded command to this node's Raft.
func (s *Scheduler) applyLocal(ctx context.Context, b []byte) (applyResult, error) {
	resp, err := s.Raft.Apply(ctx, b)
	if err != nil {
		return applyResult{}, err
	}
	res, ok := resp.(applyResult)
	if !ok {
		return applyResult{}, fmt.Errorf("unexpected FSM response %T", resp)
	}
	return res, res.Err
}

// SetJobs replicates a new job set, after checking it as a whole: an
// invalid set changes nothing. It returns the set's hash.
func (s *Scheduler) SetJobs(ctx context.Context, specs []jobs.Spec, source string) (string, error) {
	specs = slices.Clone(specs)
	for i := range specs {
		specs[i].Normalize()
	}
	if err := jobs.CheckSet(specs); err != nil {
		return "", err
	}
	_, err := s.apply(ctx, command{Op: opSetJobs, SetJobs: &setJobsCmd{Jobs: specs, Source: source, At: s.Clock.Now().UTC()}})
	if err != nil {
		return "", err
	}
	return jobs.HashSpecs(specs), nil
}

// Started records that a worker began an attempt.
func (s *Scheduler) Started(ctx context.Context, attempt string, at time.Time) error {
	_, err := s.apply(ctx, command{Op: opStart, Start: &startCmd{Attempt: attempt, At: at.UTC()}})
	return err
}

// Complete records how an attempt ended. Completing twice is harmless.
func (s *Scheduler) Complete(ctx context.Context, c Completion) error {
	_, err := s.apply(ctx, command{Op: opComplete, Complete: &c})
	return err
}

type fireEntry struct {
	at    time.Time
	spec  jobs.Spec
	sched *jobs.Schedule
}

// fireQueue is a min-heap of next fire times.
type fireQueue []*fireEntry

func (q fireQueue) Len() int           { return len(q) }
func (q fireQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q fireQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *fireQueue) Push(x any)        { *q = append(*q, x.(*fireEntry)) }
func (q *fireQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

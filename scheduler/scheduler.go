// Package scheduler is the only package that knows both leadership and
// jobs: the replicated FSM that grants runs and mints fence tokens, the
// leader's firing loop and lease table, and the worker that runs what it
// is granted.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecron/fencecron/election"
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
	// Members lists the nodes gossip knows, to choose workers from.
	Members() []election.Member
}

// Assignment is what the leader hands a worker: one attempt of one run.
type Assignment struct {
	Run     jobs.Run     `json:"run"`
	Attempt jobs.Attempt `json:"attempt"`
	Spec    jobs.Spec    `json:"spec"`
}

// TokenExpires returns when the attempt's fence token stops being good:
// jobs.Spec.TokenExpiry of its replicated grant time. The job's signed
// FENCECRON_TOKEN and the worker's own establish and publish carry it.
func (a Assignment) TokenExpires() time.Time { return a.Spec.TokenExpiry(a.Attempt.GrantedAt) }

// Dispatcher delivers an assignment to the named worker. Delivering the
// same attempt twice must start it at most once.
type Dispatcher interface {
	Dispatch(ctx context.Context, worker string, a Assignment) error
}

// RenewReply is the leader's answer to a lease renewal.
type RenewReply struct {
	// Held is false when the attempt is definitely not the worker's any
	// more (expired, superseded, finished): the worker must stop.
	Held   bool          `json:"held"`
	TTL    jobs.Duration `json:"ttl"`
	Reason string        `json:"reason,omitempty"`
}

// Scheduler fires jobs while its node leads, keeps the leases of running
// attempts, and records what workers report. Create with New, then Open
// and Close.
type Scheduler struct {
	Raft       Raft
	FSM        *FSM
	Dispatcher Dispatcher
	// Forwarder, if set, carries requests to the leader from a follower.
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
	term   atomic.Pointer[leader] // set while this node leads
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
	check := time.NewTicker(250 * time.Millisecond) // LeadershipChanged can coalesce; re-check cheaply
	defer check.Stop()
	for {
		switch isLeader := s.Raft.IsLeader(); {
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
	if err := jobs.CheckSet(specs, jobs.Limits{}); err != nil {
		return "", err
	}
	_, err := s.apply(ctx, command{Op: opSetJobs, SetJobs: &setJobsCmd{Jobs: specs, Source: source, At: s.now()}})
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

// Complete records how an attempt ended. Completing twice is harmless, and
// a completion of an attempt that was superseded touches only that one.
func (s *Scheduler) Complete(ctx context.Context, c Completion) error {
	_, err := s.apply(ctx, command{Op: opComplete, Complete: &c})
	return err
}

// Note records what a worker saw about an attempt (SUSPECT, LOST).
func (s *Scheduler) Note(ctx context.Context, attempt, kind, node, detail string) error {
	_, err := s.apply(ctx, command{Op: opNote, Note: &noteCmd{Attempt: attempt, Kind: kind, Node: node, Detail: detail, At: s.now()}})
	return err
}

// Audit records an entry of the given kind (such as jobs.EventLoginFailed)
// that node saw, in the replicated audit trail. Callers bound how often
// they call it: each call is a Raft entry.
func (s *Scheduler) Audit(ctx context.Context, kind, node, detail string) error {
	_, err := s.apply(ctx, command{Op: opAudit, Audit: &auditCmd{Kind: kind, Node: node, Detail: detail, At: s.now()}})
	return err
}

// Pause pauses or resumes a job through Raft.
func (s *Scheduler) Pause(ctx context.Context, job string, paused bool) error {
	_, err := s.apply(ctx, command{Op: opPause, Pause: &pauseCmd{Job: job, Paused: paused, At: s.now()}})
	return err
}

// Trigger starts a run of job now, on the leader.
func (s *Scheduler) Trigger(ctx context.Context, job string) (jobs.Run, error) {
	if l := s.term.Load(); l != nil {
		return l.trigger(ctx, job)
	}
	if s.Forwarder == nil || s.Raft.IsLeader() {
		return jobs.Run{}, fmt.Errorf("trigger %s: %w", job, jobs.ErrNotLeader)
	}
	return s.Forwarder.Trigger(ctx, job)
}

// Renew renews the lease of an attempt for the worker node, on the leader.
func (s *Scheduler) Renew(ctx context.Context, attempt, node string) (RenewReply, error) {
	if l := s.term.Load(); l != nil {
		return l.renew(attempt, node), nil
	}
	if s.Forwarder == nil || s.Raft.IsLeader() {
		return RenewReply{}, fmt.Errorf("renew %s: %w", attempt, jobs.ErrNotLeader)
	}
	return s.Forwarder.Renew(ctx, attempt, node)
}

// TriggerLocal and RenewLocal answer forwarded requests: only the leader
// may, and a follower says so (ErrNotLeader) so the sender looks again.
func (s *Scheduler) TriggerLocal(ctx context.Context, job string) (jobs.Run, error) {
	l := s.term.Load()
	if l == nil {
		return jobs.Run{}, fmt.Errorf("trigger %s: %w", job, jobs.ErrNotLeader)
	}
	return l.trigger(ctx, job)
}

// RenewLocal: see TriggerLocal.
func (s *Scheduler) RenewLocal(attempt, node string) (RenewReply, error) {
	l := s.term.Load()
	if l == nil {
		return RenewReply{}, fmt.Errorf("renew %s: %w", attempt, jobs.ErrNotLeader)
	}
	return l.renew(attempt, node), nil
}

func (s *Scheduler) now() time.Time { return s.Clock.Now().UTC() }

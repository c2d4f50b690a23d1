package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Backfill queues runs of a job for the fire times in [req.From, req.To)
// that have none (or, with DryRun, says which it would), on the leader.
func (s *Scheduler) Backfill(ctx context.Context, req fsm.BackfillRequest) (fsm.BackfillResult, error) {
	if s.answersHere() {
		return local{s}.Backfill(ctx, req)
	}
	return s.Forwarder.Backfill(ctx, req)
}

// Backfill answers Forwarder.Backfill as the leader.
func (l local) Backfill(ctx context.Context, req fsm.BackfillRequest) (fsm.BackfillResult, error) {
	if err := l.leads("backfill " + req.Job); err != nil {
		return fsm.BackfillResult{}, err
	}
	spec, ok := l.s.FSM.Spec(req.Job)
	if !ok {
		return fsm.BackfillResult{}, fmt.Errorf("backfill %s: %w", req.Job, jobs.ErrUnknownJob)
	}
	if req.MaxRunning == 0 {
		req.MaxRunning = replicated.DefaultBackfillMaxRunning
	}
	now := l.s.now()
	switch {
	case req.From.IsZero() || req.To.IsZero():
		return fsm.BackfillResult{}, &fsm.BackfillError{Msg: fmt.Sprintf("backfill %s: from and to are required", req.Job)}
	case req.MaxRunning < 1 || req.MaxRunning > replicated.MaxBackfillMaxRunning:
		return fsm.BackfillResult{}, &fsm.BackfillError{Msg: fmt.Sprintf("backfill %s: max_running %d: want 1 to %d", req.Job, req.MaxRunning, replicated.MaxBackfillMaxRunning)}
	case req.To.After(now):
		return fsm.BackfillResult{}, &fsm.BackfillError{Msg: fmt.Sprintf("backfill %s: to %s is in the future (now %s): the schedule fires those times itself",
			req.Job, req.To.Format(time.RFC3339), now.Format(time.RFC3339))}
	}
	times, err := fsm.BackfillTimes(spec, req.From, req.To)
	if err != nil {
		return fsm.BackfillResult{}, err
	}
	if req.DryRun {
		res := l.s.FSM.PlanBackfill(req.Job, times)
		res.From, res.To, res.DryRun, res.MaxRunning = req.From, req.To, true, req.MaxRunning
		return res, nil
	}
	res, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpBackfill, Backfill: &replicated.BackfillCmd{
		Job: req.Job, Times: times, From: req.From.UTC(), To: req.To.UTC(), MaxRunning: req.MaxRunning, At: now,
	}})
	if err != nil {
		return fsm.BackfillResult{}, err
	}
	if l.s.Logger != nil {
		l.s.Logger.Info("backfill queued", "job", req.Job, "from", req.From, "to", req.To, "create", len(res.Backfill.Create),
			"existing", len(res.Backfill.Existing), "before_horizon", len(res.Backfill.BeforeHorizon), "max_running", req.MaxRunning)
	}
	return *res.Backfill, nil
}

// pumpBackfills grants what the backfill queues allow now, in one
// goroutine at a time: each grant waits for its entry, so the next look
// at the state sees it.
func (l *leader) pumpBackfills() {
	if !l.pumping.CompareAndSwap(false, true) {
		return
	}
	due := l.s.FSM.BackfillDue()
	if len(due) == 0 {
		l.pumping.Store(false)
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer l.pumping.Store(false)
		for job, times := range due {
			spec, ok := l.s.FSM.Spec(job)
			if !ok || spec.Paused {
				continue
			}
			for _, at := range times {
				if l.ctx.Err() != nil || !l.fireBackfill(spec, at) {
					break
				}
			}
		}
	}()
}

// fireBackfill proposes the grant of a queued backfill time and dispatches
// it. With no worker to run it, it proposes nothing (the time stays
// queued) and reports false.
func (l *leader) fireBackfill(spec jobs.Spec, at time.Time) bool {
	s := l.s
	g := &replicated.GrantCmd{Job: spec.Name, ScheduledAt: at.UTC(), Trigger: fsm.TriggerBackfill, At: s.now()}
	op := replicated.OpGrant
	key, err := spec.OutputKey(at)
	if err != nil {
		op, g.Reason = replicated.OpSkip, err.Error()
	} else {
		worker, ok := l.chooseWorker(spec, jobs.RunID(spec.Name, at), "")
		if !ok {
			l.log.Debug("backfill waits for a worker", "job", spec.Name, "target", spec.Target)
			return false
		}
		g.Output, g.Worker = key, worker
	}
	res, err := l.propose(replicated.Command{Op: op, Grant: g})
	if errors.Is(err, fsm.ErrBackfillWait) {
		return false
	}
	if _, err := l.granted(spec, at, res.Run, err, 1, nil); err != nil {
		return false
	}
	return true
}

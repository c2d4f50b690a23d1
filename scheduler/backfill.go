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
	times, err := backfillTimes(spec, req.From, req.To)
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
		By: replicated.Clip(req.Asker, fsm.MaxReleaseAsker),
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
		worker, err := l.chooseWorker(spec, jobs.RunID(spec.Name, at), "")
		if err != nil {
			l.log.Debug("backfill waits for a worker", "job", spec.Name, "why", err)
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

// backfillTimes returns the fire times of spec in [from, to), in the
// job's zone, or a *BackfillError if the range is empty or holds more
// than MaxBackfillTimes.
func backfillTimes(spec jobs.Spec, from, to time.Time) ([]time.Time, error) {
	if !from.Before(to) {
		return nil, &fsm.BackfillError{Msg: fmt.Sprintf("backfill %s: from %s is not before to %s", spec.Name, from.Format(time.RFC3339), to.Format(time.RFC3339))}
	}
	sched, err := spec.Schedule()
	if err != nil {
		return nil, fmt.Errorf("backfill %s: %w", spec.Name, err)
	}
	var times []time.Time
	for t := sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = sched.Next(t) {
		if len(times) == replicated.MaxBackfillTimes {
			return nil, &fsm.BackfillError{Msg: fmt.Sprintf("backfill %s: [%s, %s) holds more than %d fire times of %v; backfill at most %d at once: narrow the range",
				spec.Name, from.Format(time.RFC3339), to.Format(time.RFC3339), replicated.MaxBackfillTimes, spec.Schedules, replicated.MaxBackfillTimes)}
		}
		times = append(times, t.UTC())
	}
	return times, nil
}

package worker

import (
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// CatchupObserver, if a worker's Observer implements it, is told of the
// start of a catch-up run (IsCatchup) instead of AttemptStarted: how late
// a run the leader granted late (after a restart, a leader change, a
// pause) started says nothing about how punctual the cluster is, and
// would swamp the lateness of runs granted on time.
type CatchupObserver interface {
	CatchupStarted(job string, scheduled, started time.Time)
}

// IsCatchup reports whether an assignment is the first attempt of a
// scheduled run that the leader granted more than jobs.MisfireGrace after its
// fire time (and jitter): a fire time it found already missed, as its
// misfire policy does (leader.handleDueInto). GrantedAt is the leader's
// clock, so the worker's own clock does not enter into it.
func IsCatchup(a Assignment) bool {
	if a.Run.Trigger == "manual" || a.Attempt.Number != 1 || a.Attempt.GrantedAt.IsZero() {
		return false
	}
	due := a.Run.ScheduledAt.Add(a.Spec.JitterFor(a.Run.ScheduledAt))
	return a.Attempt.GrantedAt.Sub(due) > jobs.MisfireGrace
}

// observeStart tells the Observer an attempt's process starts.
func (w *Worker) observeStart(a Assignment, started time.Time) {
	o := w.observer()
	if c, ok := o.(CatchupObserver); ok && IsCatchup(a) {
		c.CatchupStarted(jobOf(a), a.Run.ScheduledAt, started)
		return
	}
	o.AttemptStarted(jobOf(a), a.Run.ScheduledAt, started)
}

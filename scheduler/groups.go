package scheduler

import (
	"errors"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// grantAdmitted grants the first attempt of a run its group admitted
// (OpAdmit) to a worker the leader chooses, and dispatches it; without a
// worker, or on a failure that leaves it admitted, it tries again in a
// second (checkRetries).
func (l *leader) grantAdmitted(run jobs.Run, now time.Time) {
	later := func() {
		l.mu.Lock()
		l.retryAt[run.ID] = now.Add(time.Second)
		l.mu.Unlock()
	}
	spec, known := l.s.FSM.Spec(run.Job)
	worker, err := l.chooseWorker(spec, run.ID, "")
	if !known {
		worker, err = "", nil // its job left the set: the admit entry cancels the run
	}
	if err != nil {
		l.log.Warn("no worker for an admitted run; trying again later", jobs.LogRunID, run.ID, "group", run.Group, "why", err)
		later()
		return
	}
	res, err := l.propose(replicated.Command{Op: replicated.OpAdmit, Admit: &replicated.AdmitCmd{Run: run.ID, Worker: worker, At: l.s.now()}})
	if err != nil {
		if !errors.Is(err, jobs.ErrStaleAttempt) {
			l.log.Error("grant of an admitted run failed; trying again later", jobs.LogRunID, run.ID, "err", err)
			later()
		}
		return
	}
	a, ok := res.Run.Latest()
	if !ok {
		l.log.Info("admitted run ended before its first attempt", jobs.LogRunID, run.ID, "reason", res.Run.Reason)
		return
	}
	l.log.Info("granted", a.LogArgs("worker", a.Worker, "group", run.Group)...)
	l.track(res.Run, *a, spec)
}

package scheduler

import (
	"strings"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// followWorkers picks, for each job that follows one of runs' jobs, the
// worker its run would get if it were granted now, and renders the output
// key of each run that may follow: the leader sends them with the entry
// that may finish those runs (FollowCmd).
func (l *leader) followWorkers(runIDs []string) *replicated.FollowCmd {
	fc := &replicated.FollowCmd{At: l.s.now()}
	for _, run := range l.s.FSM.RunFollowers(runIDs) {
		for _, d := range run.Followers {
			spec, ok := l.s.FSM.Spec(d)
			if !ok {
				continue
			}
			id := jobs.RunID(d, run.ScheduledAt)
			if _, done := fc.Outputs[id]; !done && spec.Output != "" {
				var o replicated.FollowOutput
				if key, err := spec.OutputKey(run.ScheduledAt); err != nil {
					o.Err = replicated.Clip(err.Error(), fsm.MaxFollowErr)
				} else {
					o.Key = key
				}
				if fc.Outputs == nil {
					fc.Outputs = map[string]replicated.FollowOutput{}
				}
				fc.Outputs[id] = o
			}
			if _, done := fc.Workers[d]; done {
				continue
			}
			if w, err := l.chooseWorker(spec, id, ""); err == nil {
				if fc.Workers == nil {
					fc.Workers = map[string]string{}
				}
				fc.Workers[d] = w
			}
		}
	}
	return fc
}

// trackFollower dispatches a run the FSM granted because its parents
// succeeded (ChangeGranted).
func (l *leader) trackFollower(ch fsm.Change) {
	run, ok := l.s.FSM.Run(ch.Run)
	if !ok {
		return
	}
	a, ok := run.Latest()
	if !ok || a.ID != ch.Attempt || a.State.Terminal() || l.leased(a.ID) {
		return // superseded, ended, or tracked already
	}
	spec, ok := l.s.FSM.Spec(run.Job)
	if !ok {
		return
	}
	l.log.Info("granted", a.LogArgs("job", run.Job, "scheduled_at", run.ScheduledAt, "worker", a.Worker, "after", strings.Join(run.After, ","))...)
	l.track(run, *a, spec)
}

// runsOf returns the runs of a group of completions.
func runsOf(group []replicated.Completion) []string {
	out := make([]string, 0, len(group))
	for _, c := range group {
		if id, _, ok := jobs.SplitAttemptID(c.Attempt); ok {
			out = append(out, id)
		}
	}
	return out
}

// trackFollowers dispatches every open run granted because its parents
// succeeded that this term does not track: after a resync, the changes
// that said so may have been dropped.
func (l *leader) trackFollowers() {
	for _, run := range l.s.FSM.OpenRuns("") {
		a, ok := run.Latest()
		if run.Trigger != fsm.TriggerAfter || !ok || a.State != jobs.Pending || l.leased(a.ID) {
			continue
		}
		l.trackFollower(fsm.Change{Kind: fsm.ChangeGranted, Run: run.ID, Attempt: a.ID})
	}
}

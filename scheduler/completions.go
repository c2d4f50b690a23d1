package scheduler

import (
	"context"

	"github.com/fencecron/fencecron/scheduler/fsm"
)

// completionBytes estimates c's size in an entry.
func completionBytes(c fsm.Completion) int {
	return 256 + len(c.StderrTail) + len(c.StdoutTail) + len(c.Error)
}

// complete hands a checked completion to the term's committers and waits
// for its own result.
func (l *leader) complete(ctx context.Context, c fsm.Completion) error {
	return l.completions.submit(ctx, l.ctx, "complete "+c.Attempt, c)
}

// commitCompletions commits one group of completions.
func (l *leader) commitCompletions(group []fsm.Completion) []error {
	if len(group) == 1 {
		_, err := l.propose(fsm.Command{Op: fsm.OpComplete, Complete: &group[0], Follow: l.followWorkers(runsOf(group))})
		return []error{err}
	}
	res, err := l.propose(fsm.Command{Op: fsm.OpCompletes, Completes: &fsm.CompletesCmd{Completions: group}, Follow: l.followWorkers(runsOf(group))})
	return groupErrs(len(group), res, err)
}

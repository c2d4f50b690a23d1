package scheduler

import (
	"context"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// completionBytes estimates c's size in an entry.
func completionBytes(c replicated.Completion) int {
	return 256 + len(c.StderrTail) + len(c.StdoutTail) + len(c.Error)
}

// complete hands a checked completion to the term's committers and waits
// for its own result.
func (l *leader) complete(ctx context.Context, c replicated.Completion) error {
	return l.completions.submit(ctx, l.ctx, "complete "+c.Attempt, c)
}

// commitCompletions commits one group of completions.
func (l *leader) commitCompletions(group []replicated.Completion) []error {
	if len(group) == 1 {
		_, err := l.propose(replicated.Command{Op: replicated.OpComplete, Complete: &group[0], Follow: l.followWorkers(runsOf(group))})
		return []error{err}
	}
	res, err := l.propose(replicated.Command{Op: replicated.OpCompletes, Completes: &replicated.CompletesCmd{Completions: group}, Follow: l.followWorkers(runsOf(group))})
	return groupErrs(len(group), res, err)
}

package scheduler

import "context"

// completionBytes estimates c's size in an entry.
func completionBytes(c Completion) int {
	return 256 + len(c.StderrTail) + len(c.StdoutTail) + len(c.Error)
}

// complete hands a checked completion to the term's committers and waits
// for its own result.
func (l *leader) complete(ctx context.Context, c Completion) error {
	return l.completions.submit(ctx, l.ctx, "complete "+c.Attempt, c)
}

// commitCompletions commits one group of completions.
func (l *leader) commitCompletions(group []Completion) []error {
	if len(group) == 1 {
		_, err := l.propose(command{Op: opComplete, Complete: &group[0], Follow: l.followWorkers(runsOf(group))})
		return []error{err}
	}
	res, err := l.propose(command{Op: opCompletes, Completes: &completesCmd{Completions: group}, Follow: l.followWorkers(runsOf(group))})
	return groupErrs(len(group), res, err)
}

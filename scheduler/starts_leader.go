package scheduler

import "context"

// startBytes estimates a start's size in an entry.
func startBytes(startCmd) int { return 128 }

// start hands a checked start report to the term's committers and waits
// for its own result.
func (l *leader) start(ctx context.Context, s startCmd) error {
	return l.starts.submit(ctx, l.ctx, "started "+s.Attempt, s)
}

// commitStarts commits one group of start reports.
func (l *leader) commitStarts(group []startCmd) []error {
	if len(group) == 1 {
		_, err := l.propose(command{Op: opStart, Start: &group[0]})
		return []error{err}
	}
	res, err := l.propose(command{Op: opStarts, Starts: &startsCmd{Starts: group}})
	return groupErrs(len(group), res, err)
}

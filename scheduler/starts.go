package scheduler

import (
	"context"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// startBytes estimates a start's size in an entry.
func startBytes(replicated.StartCmd) int { return 128 }

// start hands a checked start report to the term's committers and waits
// for its own result.
func (l *leader) start(ctx context.Context, s replicated.StartCmd) error {
	return l.starts.submit(ctx, l.ctx, "started "+s.Attempt, s)
}

// commitStarts commits one group of start reports.
func (l *leader) commitStarts(group []replicated.StartCmd) []error {
	if len(group) == 1 {
		_, err := l.propose(replicated.Command{Op: replicated.OpStart, Start: &group[0]})
		return []error{err}
	}
	res, err := l.propose(replicated.Command{Op: replicated.OpStarts, Starts: &replicated.StartsCmd{Starts: group}})
	return groupErrs(len(group), res, err)
}

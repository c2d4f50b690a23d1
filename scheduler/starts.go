package scheduler

import (
	"context"

	"github.com/fencecron/fencecron/scheduler/fsm"
)

// startBytes estimates a start's size in an entry.
func startBytes(fsm.StartCmd) int { return 128 }

// start hands a checked start report to the term's committers and waits
// for its own result.
func (l *leader) start(ctx context.Context, s fsm.StartCmd) error {
	return l.starts.submit(ctx, l.ctx, "started "+s.Attempt, s)
}

// commitStarts commits one group of start reports.
func (l *leader) commitStarts(group []fsm.StartCmd) []error {
	if len(group) == 1 {
		_, err := l.propose(fsm.Command{Op: fsm.OpStart, Start: &group[0]})
		return []error{err}
	}
	res, err := l.propose(fsm.Command{Op: fsm.OpStarts, Starts: &fsm.StartsCmd{Starts: group}})
	return groupErrs(len(group), res, err)
}

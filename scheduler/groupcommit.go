package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// A grouper gathers what reaches the leader one item at a time (a
// completion, a start report) into groups, each committed as one Raft
// entry, and answers each item with its own result. completions.go says
// why, and why a group lingers.

// Bounds on one group: how many items, and about how many bytes (a
// completion carries up to 64 KiB of stderr).
const (
	maxGroupItems = 128
	maxGroupBytes = 1 << 20
	// committers is how many groups of a kind may be in flight at once.
	committers = 2
	// groupLinger is how long a group waits for more items after its
	// first. It is wall time, not the scheduler's clock: a bound on
	// batching, not a point in a schedule.
	groupLinger = 50 * time.Millisecond
)

// pendingItem is an item waiting for its group's commit.
type pendingItem[T any] struct {
	v    T
	done chan error // buffered: the committer never blocks on it
}

type grouper[T any] struct {
	ch chan *pendingItem[T]
	// size estimates an item's bytes in an entry.
	size func(T) int
	// commit proposes a group as one entry and returns each item's
	// result, in order.
	commit func(group []T) []error
}

func newGrouper[T any](size func(T) int, commit func([]T) []error) *grouper[T] {
	return &grouper[T]{ch: make(chan *pendingItem[T], 4*maxGroupItems), size: size, commit: commit}
}

// submit hands v to the committers and waits for its own result, or
// until ctx ends or the term (term) does.
func (g *grouper[T]) submit(ctx, term context.Context, what string, v T) error {
	p := &pendingItem[T]{v: v, done: make(chan error, 1)}
	select {
	case g.ch <- p:
	case <-ctx.Done():
		return ctx.Err()
	case <-term.Done():
		return fmt.Errorf("%s: leadership ended: %w", what, jobs.ErrNotLeader)
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-term.Done():
		// Its group may still commit; the sender tries again, which is
		// harmless: every item a grouper takes is idempotent.
		return fmt.Errorf("%s: leadership ended: %w", what, jobs.ErrNotLeader)
	}
}

// run takes whatever items are waiting, up to the bounds, and commits
// them as one entry, until the term ends.
func (g *grouper[T]) run(term context.Context) {
	for {
		var group []*pendingItem[T]
		select {
		case <-term.Done():
			return
		case p := <-g.ch:
			group = append(group, p)
		}
		size := g.size(group[0].v)
		linger := time.NewTimer(groupLinger)
	more:
		for len(group) < maxGroupItems && size < maxGroupBytes {
			select {
			case p := <-g.ch:
				group = append(group, p)
				size += g.size(p.v)
			case <-linger.C:
				break more
			case <-term.Done():
				break more
			}
		}
		linger.Stop()
		vs := make([]T, len(group))
		for i, p := range group {
			vs[i] = p.v
		}
		errs := g.commit(vs)
		for i, p := range group {
			p.done <- errs[i]
		}
	}
}

// groupErrs is the result of proposing a group as one entry: each item's
// own error, or the entry's (groupErr) for every item.
func groupErrs(n int, res fsm.ApplyResult, err error) []error {
	errs := make([]error, n)
	err = groupErr(n, res, err)
	for i := range errs {
		if err != nil {
			errs[i] = err
		} else {
			errs[i] = res.Batch[i].Err
		}
	}
	return errs
}

// groupErr is the error of a group of n items proposed as one entry as a
// whole: err, the proposal's, or that Apply did not answer each item.
func groupErr(n int, res fsm.ApplyResult, err error) error {
	if err == nil && len(res.Batch) != n {
		err = fmt.Errorf("group of %d answered with %d results", n, len(res.Batch))
	}
	return err
}

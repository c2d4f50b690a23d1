package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
)

// Completions reach the leader one by one, from every worker, and each
// used to be a Raft entry of its own: at 100 runs a second, a hundred
// commits a second on every server. The leader now commits them in
// groups (opCompletes, log version 3): a completion that arrives while
// others are being committed waits for the next group instead of for a
// commit slot of its own. Each completion in a group is applied exactly
// as a single one (applyComplete) and answered on its own; they are
// idempotent, so a worker that retries one after a lost answer changes
// nothing.
//
// A group also waits completionLinger after its first completion for
// others. Runs that fire together used to end together, and committing
// whatever was waiting made large groups; but when their processes run
// at a lower priority than the node (node.job_nice) they end spread over
// the next second, and groups of one or two made a Raft entry for almost
// every run (0.65 entries a run at 500 runs a second, and 2.1 ms of CPU
// a run across the cluster instead of 0.9). Waiting 10 ms brought that
// to 0.13 entries and 1.4 ms, 50 ms to 0.04 entries and 1.2 ms
// (fencebench lateness). A run's end is recorded up to 50 ms later;
// nothing a user sees waits on it but the next run of a job that forbids
// overlap.

// completesCmd records the completions of several attempts (opCompletes).
type completesCmd struct {
	Completions []Completion `json:"completions"`
}

// Bounds on one group: how many completions, and about how many bytes
// (a completion carries up to 64 KiB of stderr).
const (
	maxGroupCompletions = 128
	maxGroupBytes       = 1 << 20
	// completers is how many groups may be in flight at once.
	completers = 2
	// completionLinger is how long a group waits for more completions
	// after its first. It is wall time, not the scheduler's clock: a
	// bound on batching, not a point in a schedule.
	completionLinger = 50 * time.Millisecond
)

// pendingCompletion is a completion waiting for its group's commit.
type pendingCompletion struct {
	c    Completion
	done chan error // buffered: the committer never blocks on it
}

func (p *pendingCompletion) size() int {
	return 256 + len(p.c.StderrTail) + len(p.c.StdoutTail) + len(p.c.Error)
}

// applyCompletes applies each completion of a group in order.
func (f *FSM) applyCompletes(l *raft.Log, version int, c *completesCmd) applyResult {
	res := applyResult{Batch: make([]applyResult, len(c.Completions))}
	for i := range c.Completions {
		res.Batch[i] = f.applyComplete(l, version, &c.Completions[i])
	}
	return res
}

// complete hands a checked completion to the term's committers and waits
// for its own result.
func (l *leader) complete(ctx context.Context, c Completion) error {
	p := &pendingCompletion{c: c, done: make(chan error, 1)}
	select {
	case l.completions <- p:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.ctx.Done():
		return fmt.Errorf("complete %s: leadership ended: %w", c.Attempt, jobs.ErrNotLeader)
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-l.ctx.Done():
		// Its group may still commit; a worker reports again, which is
		// harmless.
		return fmt.Errorf("complete %s: leadership ended: %w", c.Attempt, jobs.ErrNotLeader)
	}
}

// commitCompletions takes whatever completions are waiting, up to the
// bounds, and commits them as one entry, until the term ends.
func (l *leader) commitCompletions() {
	defer l.wg.Done()
	for {
		var group []*pendingCompletion
		select {
		case <-l.ctx.Done():
			return
		case p := <-l.completions:
			group = append(group, p)
		}
		size := group[0].size()
		linger := time.NewTimer(completionLinger)
	more:
		for len(group) < maxGroupCompletions && size < maxGroupBytes {
			select {
			case p := <-l.completions:
				group = append(group, p)
				size += p.size()
			case <-linger.C:
				break more
			case <-l.ctx.Done():
				break more
			}
		}
		linger.Stop()
		l.commitGroup(group)
	}
}

// commitGroup commits one group and answers each of its completions.
func (l *leader) commitGroup(group []*pendingCompletion) {
	if len(group) == 1 {
		c := group[0].c
		_, err := l.propose(command{Op: opComplete, Complete: &c, Follow: l.followWorkers(runsOf(group))})
		group[0].done <- err
		return
	}
	cmd := &completesCmd{Completions: make([]Completion, len(group))}
	for i, p := range group {
		cmd.Completions[i] = p.c
	}
	res, err := l.propose(command{Op: opCompletes, Completes: cmd, Follow: l.followWorkers(runsOf(group))})
	if err == nil && len(res.Batch) != len(group) {
		err = fmt.Errorf("group of %d completions answered with %d results", len(group), len(res.Batch))
	}
	for i, p := range group {
		if err != nil {
			p.done <- err
			continue
		}
		p.done <- res.Batch[i].Err
	}
}

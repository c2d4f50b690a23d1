package scheduler

import (
	"context"
	"fmt"

	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// CompleteMany reports completions: as the leader, or through the
// Forwarder.
func (s *Scheduler) CompleteMany(ctx context.Context, cs []replicated.Completion) ([]error, error) {
	if s.answersHere() {
		return local{s}.CompleteMany(ctx, cs)
	}
	return s.Forwarder.CompleteMany(ctx, cs)
}

// CompleteMany answers as the leader: every completion at once, so that
// they share the committer's groups, each answered as Complete answers.
func (l local) CompleteMany(ctx context.Context, cs []replicated.Completion) ([]error, error) {
	if len(cs) > worker.MaxCompleteBatch {
		return nil, invalid("complete %d attempts at once: at most %d", len(cs), worker.MaxCompleteBatch)
	}
	if err := l.leads(fmt.Sprintf("complete %d attempts", len(cs))); err != nil {
		return nil, err
	}
	return worker.CompleteEach(ctx, l, cs), nil
}

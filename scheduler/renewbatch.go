package scheduler

import (
	"context"
	"fmt"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// RenewMany renews attempts of node: as the leader, or through the
// Forwarder.
func (s *Scheduler) RenewMany(ctx context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	if s.answersHere() {
		return local{s}.RenewMany(ctx, node, rs)
	}
	return s.Forwarder.RenewMany(ctx, node, rs)
}

// RenewMany answers as the leader, each attempt as Renew does.
func (l local) RenewMany(ctx context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	if len(rs) > worker.MaxRenewBatch {
		return nil, invalid("renew %d attempts at once: at most %d", len(rs), worker.MaxRenewBatch)
	}
	t := l.s.term.Load()
	if t == nil {
		return nil, fmt.Errorf("renew %d attempts: %w", len(rs), jobs.ErrNotLeader)
	}
	out := make([]worker.RenewReply, len(rs))
	for i, r := range rs {
		reply, err := t.renew(r, node)
		if err != nil {
			return nil, err
		}
		out[i] = reply
	}
	return out, nil
}

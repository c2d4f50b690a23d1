package scheduler

import (
	"context"
	"fmt"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
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
	return t.renewAll(ctx, node, rs)
}

// renewAll renews each of rs (renew), then confirms in one entry the
// starts the log must confirm (scheduler/fsm/prestart.go): the answers go
// out once it is applied, and a start it refuses is a "not yours". An
// entry that could not be committed fails the whole call, and the worker
// asks again: a worker starts on any Held answer to a start (an older
// leader answers no Started), so there is no answer that says "not yet".
func (l *leader) renewAll(ctx context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	l.heardFrom(node, nil) // it is there
	out := make([]worker.RenewReply, len(rs))
	var logged []int
	for i, r := range rs {
		reply, inLog, err := l.renew(r, node)
		if err != nil {
			return nil, err
		}
		out[i] = reply
		if inLog {
			logged = append(logged, i)
		}
	}
	if len(logged) == 0 {
		return out, nil
	}
	ids := make([]string, len(logged))
	for j, i := range logged {
		ids[j] = rs[i].Attempt
	}
	res, err := l.proposeWith(ctx, replicated.Command{Op: replicated.OpConfirmStarts, ConfirmStarts: &replicated.ConfirmStartsCmd{Attempts: ids, At: l.s.now()}})
	if err := groupErr(len(ids), res, err); err != nil {
		return nil, fmt.Errorf("confirm the start of %s: %w", ids[0], err)
	}
	now := l.s.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for j, i := range logged {
		if err := res.Batch[j].Err; err != nil {
			out[i] = worker.RenewReply{Reason: err.Error()} // Apply decided: the start is not its worker's
			continue
		}
		// Confirmed before any expiry of it: one after is refused.
		if le := l.leases[ids[j]]; le != nil {
			le.started, le.onShort, le.inLog, le.deadline = true, false, false, now.Add(le.ttl)
			out[i].TTL = jobs.Duration(le.ttl)
		}
		out[i].Started = rs[i].Start
	}
	return out, nil
}

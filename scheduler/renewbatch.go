package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
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
// starts the log must confirm (scheduler/fsm/prestart.go): their answers
// go out once it is applied, and one it refuses is a "not yours".
func (l *leader) renewAll(ctx context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error) {
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
	for j, err := range groupErrs(len(ids), res, err) {
		switch {
		case err == nil:
		case errors.Is(err, fsm.ErrStartNotConfirmed):
			out[logged[j]] = worker.RenewReply{Reason: err.Error()}
		default:
			// Not known to be refused: the worker asks again.
			return nil, fmt.Errorf("confirm the start of %s: %w", ids[j], err)
		}
	}
	return out, nil
}

package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// BatchRenewer renews the leases of several attempts of one node in one
// call, answering for each as Renew would, in order. A worker whose
// Leader implements it sends its lease confirmations and renewals in
// batches: at hundreds of fires a second, one call per attempt to the
// leader is most of what a run costs it, and the attempts granted for one
// instant all confirm their leases at once. The lease is still counted
// from when each attempt asked (leaseClient.renewOnce), which is no later
// than the batch was sent: batching can only shorten it on the worker.
type BatchRenewer interface {
	RenewMany(ctx context.Context, node string, rs []Renewal) ([]RenewReply, error)
}

// maxRenewBatch bounds the attempts of one RenewMany.
const maxRenewBatch = 256

// renewSenders is how many batches a worker has in flight at once, and
// renewBatchTimeout how long one may take: each attempt waits for its
// own answer only as long as its renewal's own timeout.
const (
	renewSenders      = 2
	renewBatchTimeout = 10 * time.Second
)

var (
	_ BatchRenewer = (*Scheduler)(nil)
	_ BatchRenewer = local{}
)

// RenewMany renews attempts of node: as the leader, or through the
// Forwarder (in one call if it can, one per attempt if not).
func (s *Scheduler) RenewMany(ctx context.Context, node string, rs []Renewal) ([]RenewReply, error) {
	if s.answersHere() {
		return local{s}.RenewMany(ctx, node, rs)
	}
	if br, ok := s.Forwarder.(BatchRenewer); ok {
		return br.RenewMany(ctx, node, rs)
	}
	return RenewEach(ctx, s.Forwarder, node, rs)
}

// RenewMany answers as the leader, each attempt as Renew does.
func (l local) RenewMany(ctx context.Context, node string, rs []Renewal) ([]RenewReply, error) {
	if len(rs) > maxRenewBatch {
		return nil, invalid("renew %d attempts at once: at most %d", len(rs), maxRenewBatch)
	}
	t := l.s.term.Load()
	if t == nil {
		return nil, fmt.Errorf("renew %d attempts: %w", len(rs), jobs.ErrNotLeader)
	}
	out := make([]RenewReply, len(rs))
	for i, r := range rs {
		reply, err := t.renew(r, node)
		if err != nil {
			return nil, err
		}
		out[i] = reply
	}
	return out, nil
}

// RenewEach renews attempts one call each through r: what a batch falls
// back to when the leader does not take batches (an older version). Such
// a leader confirms no start: its answers have no Started.
func RenewEach(ctx context.Context, r interface {
	Renew(ctx context.Context, attempt, node string) (RenewReply, error)
}, node string, rs []Renewal) ([]RenewReply, error) {
	out := make([]RenewReply, len(rs))
	for i, a := range rs {
		reply, err := r.Renew(ctx, a.Attempt, node)
		if err != nil {
			return nil, err
		}
		out[i] = reply
	}
	return out, nil
}

// renew asks the leader to renew attempt's lease, and with start to
// confirm its start: in a batch with the worker's other attempts if its
// Leader takes batches. A Leader that does not confirms no start (the
// reply has no Started), as an older leader.
func (w *Worker) renew(ctx context.Context, attempt string, start bool) (RenewReply, error) {
	if w.renewQ == nil {
		return w.Leader.Renew(ctx, attempt, w.ID)
	}
	return w.renewQ.call(ctx, Renewal{Attempt: attempt, Start: start, Confirming: true})
}

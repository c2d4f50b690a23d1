package worker

import (
	"context"
	"sync"
	"time"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// BatchCompleter reports several attempts' completions in one call,
// answering for each, in order, as Complete would. A worker whose Leader
// implements it sends its completions in batches. One call per run was,
// after the job's own process, the largest part of what a short run cost
// the cluster: a request, its TLS records and HTTP/2 frames, and a
// handler on the leader, at hundreds of runs a second. The leader commits
// completions in groups anyway (completions.go), so a batch changes what
// reaches the log in no way; a completion waits only for the call before
// it on its worker to be answered.
type BatchCompleter interface {
	CompleteMany(ctx context.Context, cs []replicated.Completion) ([]error, error)
}

// Bounds on one batch: how many completions (the leader refuses more),
// and about how many bytes of request (a completion carries up to 64 KiB
// of stderr, and JSON may escape a byte in six).
const (
	MaxCompleteBatch      = 128
	maxCompleteBatchBytes = 4 << 20
)

// completeSenders is how many batches a worker has in flight at once,
// and completeBatchTimeout how long one may take before its completions
// are retried as reportCompletion retries a single one.
const (
	completeSenders      = 2
	completeBatchTimeout = 10 * time.Second
)

// completionRequestBytes estimates c's size in a request.
func completionRequestBytes(c replicated.Completion) int {
	return 512 + 6*(len(c.StderrTail)+len(c.StdoutTail)+len(c.Error))
}

// CompleteEach reports each completion through c, all at once, and
// returns each one's error: what a batch falls back to when the leader
// does not take batches (an older version).
func CompleteEach(ctx context.Context, c interface {
	Complete(ctx context.Context, c replicated.Completion) error
}, cs []replicated.Completion) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() { errs[i] = c.Complete(ctx, cs[i]) })
	}
	wg.Wait()
	return errs
}

// complete reports c to the leader, in a batch with the worker's other
// completions if its Leader takes batches.
func (w *Worker) complete(c replicated.Completion) error {
	if w.completeQ == nil {
		return w.Leader.Complete(w.report, c)
	}
	err, qerr := w.completeQ.call(w.report, c)
	if qerr != nil {
		return qerr
	}
	return err
}

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

// MaxRenewBatch bounds the attempts of one RenewMany.
const MaxRenewBatch = 256

// renewSenders is how many batches a worker has in flight at once, and
// renewBatchTimeout how long one may take: each attempt waits for its
// own answer only as long as its renewal's own timeout.
const (
	renewSenders      = 2
	renewBatchTimeout = 10 * time.Second
)

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

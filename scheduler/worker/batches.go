package worker

import (
	"context"
	"sync"
	"time"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A worker sends its completions to the leader in batches
// (Leader.CompleteMany). One call per run was, after the job's own
// process, the largest part of what a short run cost the cluster: a
// request, its TLS records and HTTP/2 frames, and a handler on the
// leader, at hundreds of runs a second. The leader commits completions in
// groups anyway (scheduler/completions.go), so a batch changes what reaches the log
// in no way; a completion waits only for the call before it on its
// worker to be answered.

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
// returns each one's error: a batch answered one completion at a time
// (the leader's own CompleteMany, and a client whose leader is of an
// older version without batches).
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
// completions.
func (w *Worker) complete(c replicated.Completion) error {
	err, qerr := w.completeQ.call(w.report, c)
	if qerr != nil {
		return qerr
	}
	return err
}

// A worker sends its lease confirmations and renewals in batches
// (Leader.RenewMany): at hundreds of fires a second, one call per attempt
// to the leader is most of what a run costs it, and the attempts granted
// for one instant all confirm their leases at once. The lease is still
// counted from when each attempt asked (leaseClient.renewOnce), which is
// no later than the batch was sent: batching can only shorten it on the
// worker.

// MaxRenewBatch bounds the attempts of one RenewMany.
const MaxRenewBatch = 256

// renewSenders is how many batches a worker has in flight at once, and
// renewBatchTimeout how long one may take: each attempt waits for its
// own answer only as long as its renewal's own timeout.
const (
	renewSenders      = 2
	renewBatchTimeout = 10 * time.Second
)

// renew asks the leader to renew attempt's lease, with start to confirm
// its start, and with preStart for the short lease before the start, in a
// batch with the worker's other attempts.
func (w *Worker) renew(ctx context.Context, attempt string, start, preStart bool) (RenewReply, error) {
	return w.renewQ.call(ctx, Renewal{Attempt: attempt, Start: start, Confirming: true, PreStart: preStart})
}

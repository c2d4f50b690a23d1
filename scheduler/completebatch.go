package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencecron/fencecron/scheduler/fsm"
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
	CompleteMany(ctx context.Context, cs []fsm.Completion) ([]error, error)
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

var (
	_ BatchCompleter = (*Scheduler)(nil)
	_ BatchCompleter = local{}
)

// completionRequestBytes estimates c's size in a request.
func completionRequestBytes(c fsm.Completion) int {
	return 512 + 6*(len(c.StderrTail)+len(c.StdoutTail)+len(c.Error))
}

// CompleteMany reports completions: as the leader, or through the
// Forwarder (in one call if it can, one per completion if not).
func (s *Scheduler) CompleteMany(ctx context.Context, cs []fsm.Completion) ([]error, error) {
	if s.answersHere() {
		return local{s}.CompleteMany(ctx, cs)
	}
	if bc, ok := s.Forwarder.(BatchCompleter); ok {
		return bc.CompleteMany(ctx, cs)
	}
	return CompleteEach(ctx, s.Forwarder, cs), nil
}

// CompleteMany answers as the leader: every completion at once, so that
// they share the committer's groups, each answered as Complete answers.
func (l local) CompleteMany(ctx context.Context, cs []fsm.Completion) ([]error, error) {
	if len(cs) > MaxCompleteBatch {
		return nil, invalid("complete %d attempts at once: at most %d", len(cs), MaxCompleteBatch)
	}
	if err := l.leads(fmt.Sprintf("complete %d attempts", len(cs))); err != nil {
		return nil, err
	}
	return CompleteEach(ctx, l, cs), nil
}

// CompleteEach reports each completion through c, all at once, and
// returns each one's error: what a batch falls back to when the leader
// does not take batches (an older version).
func CompleteEach(ctx context.Context, c interface {
	Complete(ctx context.Context, c fsm.Completion) error
}, cs []fsm.Completion) []error {
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
func (w *Worker) complete(c fsm.Completion) error {
	if w.completeQ == nil {
		return w.Leader.Complete(w.report, c)
	}
	err, qerr := w.completeQ.call(w.report, c)
	if qerr != nil {
		return qerr
	}
	return err
}

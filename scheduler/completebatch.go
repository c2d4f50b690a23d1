package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"
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
	CompleteMany(ctx context.Context, cs []Completion) ([]error, error)
}

// Bounds on one batch: how many completions (the leader refuses more),
// and about how many bytes of request (a completion carries up to 64 KiB
// of stderr, and JSON may escape a byte in six).
const (
	MaxCompleteBatch      = 128
	MaxCompleteBatchBytes = 4 << 20
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
func completionRequestBytes(c Completion) int {
	return 512 + 6*(len(c.StderrTail)+len(c.StdoutTail)+len(c.Error))
}

// CompleteMany reports completions: as the leader, or through the
// Forwarder (in one call if it can, one per completion if not).
func (s *Scheduler) CompleteMany(ctx context.Context, cs []Completion) ([]error, error) {
	if s.term.Load() != nil || s.Forwarder == nil || s.Raft.IsLeader() {
		return local{s}.CompleteMany(ctx, cs)
	}
	if bc, ok := s.Forwarder.(BatchCompleter); ok {
		return bc.CompleteMany(ctx, cs)
	}
	return CompleteEach(ctx, s.Forwarder, cs), nil
}

// CompleteMany answers as the leader: every completion at once, so that
// they share the committer's groups, each answered as Complete answers.
func (l local) CompleteMany(ctx context.Context, cs []Completion) ([]error, error) {
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
	Complete(ctx context.Context, c Completion) error
}, cs []Completion) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() { errs[i] = c.Complete(ctx, cs[i]) })
	}
	wg.Wait()
	return errs
}

// completeCall is one completion waiting in its worker's batch.
type completeCall struct {
	c    Completion
	err  error
	done chan struct{}
}

// complete reports c to the leader, in a batch with the worker's other
// completions if its Leader takes batches.
func (w *Worker) complete(c Completion) error {
	if w.completeQ == nil {
		return w.Leader.Complete(w.report, c)
	}
	call := &completeCall{c: c, done: make(chan struct{})}
	select {
	case w.completeQ <- call:
	case <-w.report.Done():
		return w.report.Err()
	}
	select {
	case <-call.done:
		return call.err
	case <-w.report.Done():
		return w.report.Err()
	}
}

// sendCompletions sends the completions waiting in the queue, as many as
// have come (within the bounds) in each call, until the worker gives up
// reporting. No batch waits to fill: while one call is answered, the
// next gathers what ended meanwhile.
func (w *Worker) sendCompletions(bc BatchCompleter) {
	defer w.senders.Done()
	var next *completeCall // the one that did not fit the last batch
	for {
		if next == nil {
			select {
			case <-w.report.Done():
				return
			case next = <-w.completeQ:
			}
		}
		batch := []*completeCall{next}
		size := completionRequestBytes(next.c)
		next = nil
	more:
		for len(batch) < MaxCompleteBatch {
			select {
			case c := <-w.completeQ:
				if size += completionRequestBytes(c.c); size > MaxCompleteBatchBytes {
					next = c
					break more
				}
				batch = append(batch, c)
			default:
				break more
			}
		}
		cs := make([]Completion, len(batch))
		for i, c := range batch {
			cs[i] = c.c
		}
		ctx, cancel := context.WithTimeout(w.report, completeBatchTimeout)
		errs, err := bc.CompleteMany(ctx, cs)
		cancel()
		if err == nil && len(errs) != len(batch) {
			err = fmt.Errorf("completed %d attempts, answered for %d", len(batch), len(errs))
		}
		for i, c := range batch {
			if err != nil {
				c.err = err
			} else {
				c.err = errs[i]
			}
			close(c.done)
		}
	}
}

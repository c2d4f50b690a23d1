package worker

import (
	"context"
	"fmt"
	"time"
)

// batchQueue carries one kind of worker call to the leader in batches
// (lease renewals, renewbatch.go; completions, completebatch.go): a
// sender takes as many calls as are waiting, within the bounds, and
// sends them in one request. No batch waits to fill: while one request
// is answered, the next gathers what came meanwhile.
type batchQueue[Req, Rep any] struct {
	q chan *batchCall[Req, Rep]
	// maxN bounds a batch's calls, and maxBytes (0: none) their size as
	// size estimates it.
	maxN, maxBytes int
	size           func(Req) int
	// timeout bounds one request.
	timeout time.Duration
	// send makes one request, answering each call in order.
	send func(ctx context.Context, reqs []Req) ([]Rep, error)
}

// batchCall is one call waiting in a batchQueue, and its answer.
type batchCall[Req, Rep any] struct {
	req  Req
	rep  Rep
	err  error
	done chan struct{}
}

func newBatchQueue[Req, Rep any](maxN int, timeout time.Duration, send func(context.Context, []Req) ([]Rep, error)) *batchQueue[Req, Rep] {
	return &batchQueue[Req, Rep]{q: make(chan *batchCall[Req, Rep], 4*maxN), maxN: maxN, timeout: timeout, send: send}
}

// call queues req and waits for its answer, or until ctx ends.
func (b *batchQueue[Req, Rep]) call(ctx context.Context, req Req) (Rep, error) {
	c := &batchCall[Req, Rep]{req: req, done: make(chan struct{})}
	var zero Rep
	select {
	case b.q <- c:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case <-c.done:
		return c.rep, c.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// run sends batches until ctx ends; every call it took is answered.
func (b *batchQueue[Req, Rep]) run(ctx context.Context) {
	var next *batchCall[Req, Rep] // the one that did not fit the last batch
	for {
		if next == nil {
			select {
			case <-ctx.Done():
				return
			case next = <-b.q:
			}
		}
		batch := []*batchCall[Req, Rep]{next}
		size := b.sizeOf(next.req)
		next = nil
	more:
		for len(batch) < b.maxN {
			select {
			case c := <-b.q:
				if size += b.sizeOf(c.req); b.maxBytes > 0 && size > b.maxBytes {
					next = c
					break more
				}
				batch = append(batch, c)
			default:
				break more
			}
		}
		reqs := make([]Req, len(batch))
		for i, c := range batch {
			reqs[i] = c.req
		}
		sctx, cancel := context.WithTimeout(ctx, b.timeout)
		reps, err := b.send(sctx, reqs)
		cancel()
		if err == nil && len(reps) != len(batch) {
			err = fmt.Errorf("sent %d calls in one request, answered for %d", len(batch), len(reps))
		}
		for i, c := range batch {
			if err != nil {
				c.err = err
			} else {
				c.rep = reps[i]
			}
			close(c.done)
		}
	}
}

func (b *batchQueue[Req, Rep]) sizeOf(r Req) int {
	if b.size == nil {
		return 0
	}
	return b.size(r)
}

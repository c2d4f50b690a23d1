package scheduler

import (
	"context"
	"time"

	"github.com/fencecron/fencecron/scheduler/worker"
)

// BatchDispatcher is a Dispatcher that can also deliver several
// assignments to one worker in one call: the runs granted in one entry
// for one instant reach each worker in one request instead of one each
// (at hundreds of fires a second, that request is most of what a run
// costs the leader). Delivering an attempt twice must still start it at
// most once. An error says nothing about which assignments arrived: the
// leader then dispatches each on its own (Dispatch), which the worker
// answers for a duplicate without starting anything.
type BatchDispatcher interface {
	DispatchMany(ctx context.Context, wk string, as []worker.Assignment) error
}

// maxDispatchBatch bounds the assignments of one call (each carries its
// job's spec).
const maxDispatchBatch = 64

// dispatchAll delivers assignments: those for one worker in calls of up
// to maxDispatchBatch where the Dispatcher can (BatchDispatcher), each on
// its own otherwise or if its call fails.
func (l *leader) dispatchAll(as []worker.Assignment) {
	bd, ok := l.s.Dispatcher.(BatchDispatcher)
	if !ok || len(as) < 2 {
		for _, a := range as {
			l.dispatch(a)
		}
		return
	}
	byWorker := map[string][]worker.Assignment{}
	var order []string
	for _, a := range as {
		w := a.Attempt.Worker
		if _, ok := byWorker[w]; !ok {
			order = append(order, w)
		}
		byWorker[w] = append(byWorker[w], a)
	}
	for _, w := range order {
		group := byWorker[w]
		for len(group) > 0 {
			n := min(len(group), maxDispatchBatch)
			chunk := group[:n]
			group = group[n:]
			if len(chunk) == 1 {
				l.dispatch(chunk[0])
				continue
			}
			var mine []worker.Assignment
			l.mu.Lock()
			for _, a := range chunk {
				if !l.inflight[a.Attempt.ID] {
					l.inflight[a.Attempt.ID] = true
					mine = append(mine, a)
				}
			}
			l.mu.Unlock()
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
				err := bd.DispatchMany(ctx, w, mine)
				cancel()
				l.mu.Lock()
				for _, a := range mine {
					delete(l.inflight, a.Attempt.ID)
				}
				l.mu.Unlock()
				if err == nil || l.ctx.Err() != nil {
					return
				}
				l.log.Warn("batch dispatch failed; dispatching each attempt on its own", "worker", w, "attempts", len(mine), "err", err)
				for _, a := range mine {
					if l.leased(a.Attempt.ID) {
						l.dispatch(a)
					}
				}
			}()
		}
	}
}

package scheduler

import (
	"context"
	"time"

	"github.com/fencecron/fencecron/scheduler/worker"
)

// maxDispatchBatch bounds the assignments of one call (each carries its
// job's spec).
const maxDispatchBatch = 64

// dispatchAll delivers assignments: those for one worker in calls of up
// to maxDispatchBatch (Dispatcher.DispatchMany), each on its own if alone
// or if its call fails.
func (l *leader) dispatchAll(as []worker.Assignment) {
	if len(as) < 2 {
		for _, a := range as {
			l.dispatch(a)
		}
		return
	}
	// Each worker's slice is made at its size: an assignment carries its
	// job's spec, and slices grown by append copied them all again.
	counts := map[string]int{}
	for _, a := range as {
		counts[a.Attempt.Worker]++
	}
	byWorker := make(map[string][]worker.Assignment, len(counts))
	var order []string
	for _, a := range as {
		w := a.Attempt.Worker
		if _, ok := byWorker[w]; !ok {
			order = append(order, w)
			byWorker[w] = make([]worker.Assignment, 0, counts[w])
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
			mine := chunk[:0] // filtered in place: the chunks do not overlap
			l.mu.Lock()
			for _, a := range chunk {
				if !l.inflight[a.Attempt.ID] {
					l.inflight[a.Attempt.ID] = true
					mine = append(mine, a)
				}
			}
			l.mu.Unlock()
			if len(mine) == 0 {
				continue // every one of them is being dispatched already
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
				err := l.s.Dispatcher.DispatchMany(ctx, w, mine)
				cancel()
				l.heardFrom(w, err)
				l.mu.Lock()
				for _, a := range mine {
					delete(l.inflight, a.Attempt.ID)
				}
				l.mu.Unlock()
				if err == nil || l.ctx.Err() != nil {
					for _, a := range mine {
						l.dispatched(a.Attempt.ID, err)
					}
					return
				}
				l.log.Warn("batch dispatch failed; dispatching each attempt on its own", "worker", w, "attempts", len(mine), "err", err)
				for _, a := range mine {
					if l.leased(a.Attempt.ID) {
						l.dispatch(a)
					} else {
						l.dispatched(a.Attempt.ID, err) // its lease went meanwhile
					}
				}
			}()
		}
	}
}

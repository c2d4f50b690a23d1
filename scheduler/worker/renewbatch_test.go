package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// batchLeader confirms every lease, counting the attempts renewed in
// batches.
type batchLeader struct {
	holdingLeader
	mu      sync.Mutex
	batched int
	// starts counts renewals that asked for a start's confirmation,
	// unconfirming those that did not say the worker confirms starts.
	starts, unconfirming int
}

func (l *batchLeader) RenewMany(_ context.Context, _ string, rs []Renewal) ([]RenewReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batched += len(rs)
	out := make([]RenewReply, len(rs))
	for i, r := range rs {
		if !r.Confirming {
			l.unconfirming++
		}
		if r.Start {
			l.starts++
		}
		out[i] = RenewReply{Held: true, TTL: jobs.Duration(5 * time.Second), Started: r.Start}
	}
	return out, nil
}

// A worker confirms its attempts' leases in batches, and runs every
// attempt.
func TestWorker_RenewsInBatches(t *testing.T) {
	l := &batchLeader{holdingLeader: holdingLeader{done: make(chan replicated.Completion, 8)}}
	w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	const n = 8
	for i := range n {
		run := jobs.Run{ID: fmt.Sprintf("j%d@x", i), Job: fmt.Sprintf("j%d", i)}
		a := Assignment{Run: run, Spec: jobs.Spec{Name: run.Job, Command: []string{"true"}, Timeout: jobs.Duration(10 * time.Second), LeaseTTL: jobs.Duration(5 * time.Second)},
			Attempt: jobs.Attempt{ID: run.ID + ".1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 1, Seq: uint64(i + 1)}, GrantedAt: time.Now()}}
		if err := w.Accept(a); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if c := l.completion(t); c.State != jobs.Succeeded {
			t.Errorf("completion %+v: want succeeded", c)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.batched < n {
		t.Errorf("%d renewed in batches; want at least %d", l.batched, n)
	}
	// Each attempt starts at once: its first renewal asks for the start.
	if l.starts < n || l.unconfirming != 0 {
		t.Errorf("%d renewals asked for a start, %d did not say the worker confirms starts; want at least %d, and 0", l.starts, l.unconfirming, n)
	}
}

package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// gatedCompleter takes completions in batches. Its first calls wait for
// gate; answer, if set, is each completion's answer (nil: recorded).
type gatedCompleter struct {
	holdingLeader
	gate    chan struct{}
	arrived chan int // the size of each batch, as it arrives
	answer  func(c replicated.Completion, tries int) error

	mu      sync.Mutex
	batches [][]string // each batch's attempts, in the order they arrived
	tries   map[string]int
}

func (l *gatedCompleter) CompleteMany(_ context.Context, cs []replicated.Completion) ([]error, error) {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.Attempt)
	}
	l.mu.Lock()
	l.batches = append(l.batches, ids)
	l.mu.Unlock()
	l.arrived <- len(cs)
	<-l.gate
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := make([]error, len(cs))
	for i, c := range cs {
		l.tries[c.Attempt]++
		if l.answer != nil {
			errs[i] = l.answer(c, l.tries[c.Attempt])
		}
		if errs[i] == nil {
			l.done <- c
		}
	}
	return errs, nil
}

func newGatedCompleter(n int) *gatedCompleter {
	return &gatedCompleter{holdingLeader: holdingLeader{done: make(chan replicated.Completion, n)}, gate: make(chan struct{}),
		arrived: make(chan int, 4*n), tries: map[string]int{}}
}

func acceptTrue(t *testing.T, w *Worker, i int) string {
	t.Helper()
	run := jobs.Run{ID: fmt.Sprintf("j%d@x", i), Job: fmt.Sprintf("j%d", i)}
	a := Assignment{Run: run, Spec: jobs.Spec{Name: run.Job, Command: []string{"true"}, Timeout: jobs.Duration(10 * time.Second), LeaseTTL: jobs.Duration(5 * time.Second)},
		Attempt: jobs.Attempt{ID: run.ID + ".1", Number: 1, Worker: w.ID, Token: jobs.Fence{Epoch: 1, Seq: uint64(i + 1)}, GrantedAt: time.Now()}}
	if err := w.Accept(a); err != nil {
		t.Fatal(err)
	}
	return a.Attempt.ID
}

// A worker reports its completions in batches: what ends while a batch
// is in flight goes in the next one, together.
func TestWorker_CompletesInBatches(t *testing.T) {
	const n = 8
	l := newGatedCompleter(n)
	w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	var want []string
	for i := range n {
		want = append(want, acceptTrue(t, w, i))
	}
	// Both senders hold a batch at the gate; the rest queue behind them.
	inFlight := 0
	for range completeSenders {
		select {
		case k := <-l.arrived:
			inFlight += k
		case <-time.After(30 * time.Second):
			t.Fatal("no batch of completions in 30s")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(w.completeQ.q) < n-inFlight {
		if time.Now().After(deadline) {
			t.Fatalf("%d completions queued after 30s, want %d", len(w.completeQ.q), n-inFlight)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(l.gate)
	var got []string
	for range n {
		got = append(got, l.completion(t).Attempt)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("completed %q, want %q", got, want)
	}
	// What queued behind the gate went in few batches, after the two held
	// there (which may have been larger: processes end together). Both
	// senders leave the gate at once and drain the queue together, so the
	// queued completions may be split between them, but not further.
	l.mu.Lock()
	defer l.mu.Unlock()
	after := l.batches[completeSenders:]
	queued := 0
	for _, b := range after {
		queued += len(b)
	}
	if queued != n-inFlight || len(after) > completeSenders {
		t.Errorf("batches %q; want the %d queued in at most %d batches", l.batches, n-inFlight, completeSenders)
	}
}

// Each completion of a batch gets its own answer: one the leader no
// longer knows is given up, one it could not record now is sent again.
func TestWorker_BatchAnswersEachCompletion(t *testing.T) {
	l := newGatedCompleter(2)
	close(l.gate)
	l.answer = func(c replicated.Completion, tries int) error {
		switch {
		case c.Attempt == "j0@x.1":
			return fmt.Errorf("complete %s: %w", c.Attempt, jobs.ErrNotFound)
		case tries == 1:
			return fmt.Errorf("complete %s: %w", c.Attempt, jobs.ErrNotLeader)
		}
		return nil
	}
	w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	gone, busy := acceptTrue(t, w, 0), acceptTrue(t, w, 1)
	if c := l.completion(t); c.Attempt != busy {
		t.Errorf("recorded %s, want %s", c.Attempt, busy)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tries[gone] != 1 || l.tries[busy] != 2 {
		t.Errorf("sent %s %d times and %s %d times; want 1 (not found is final) and 2 (not leader is retried)", gone, l.tries[gone], busy, l.tries[busy])
	}
}

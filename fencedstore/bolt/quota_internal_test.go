package bolt

import (
	"context"
	"errors"
	"testing"
)

// Scopes that share a first path segment share a lock; others do not; a
// waiter gives up with its context; and no entry outlives its holders.
func TestScopeLocks(t *testing.T) {
	var l scopeLocks
	ctx := context.Background()
	unlock, err := l.lock(ctx, "reports/")
	if err != nil {
		t.Fatal(err)
	}
	// Another first segment: free at once.
	unlockLogs, err := l.lock(ctx, "logs/")
	if err != nil {
		t.Fatal(err)
	}
	// A nested scope waits for the outer one's writer.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.lock(cctx, "reports/monthly/"); !errors.Is(err, context.Canceled) {
		t.Fatalf("lock of a nested scope while the outer one is held: err = %v, want to wait (and give up when cancelled)", err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := l.lock(ctx, "reports/monthly/")
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("the nested scope got the lock while the outer one was held")
	default:
	}
	unlock()
	(<-got)()
	unlockLogs()
	if n := l.entries(); n != 0 {
		t.Errorf("%d lock entries left after every holder released, want 0", n)
	}
}

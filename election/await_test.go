package election

import (
	"context"
	"errors"
	"testing"
	"time"
)

// silentFuture is a raft future that is answered only when the test
// says so, like one raft took and then dropped (hashicorp/raft#498).
type silentFuture struct{ answer chan error }

func (f silentFuture) Error() error { return <-f.answer }

func TestAwait_GivesUpOnAnAnswerThatDoesNotCome(t *testing.T) {
	n := &Node{done: make(chan struct{})}

	f := silentFuture{answer: make(chan error)}
	defer close(f.answer) // lets await's waiting goroutine end
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.await(ctx, f); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("await past the deadline: err = %v, want %v", err, context.DeadlineExceeded)
	}

	g := silentFuture{answer: make(chan error)}
	defer close(g.answer)
	close(n.done)
	if err := n.await(context.Background(), g); !errors.Is(err, ErrClosed) {
		t.Errorf("await on a closed node: err = %v, want %v", err, ErrClosed)
	}

	h := silentFuture{answer: make(chan error, 1)}
	want := errors.New("leadership lost")
	h.answer <- want
	if err := (&Node{done: make(chan struct{})}).await(context.Background(), h); err != want {
		t.Errorf("await of an answered future: err = %v, want %v", err, want)
	}
}

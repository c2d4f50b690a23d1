package worker

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// gateLeader takes notes one at a time: each Note says it has begun on
// entered, then waits for release.
type gateLeader struct {
	holdingLeader
	entered, release chan struct{}

	mu    sync.Mutex
	notes []string
}

func (l *gateLeader) Note(_ context.Context, attempt, kind, node, detail string) error {
	l.entered <- struct{}{}
	<-l.release
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, attempt+" "+kind+" "+node+" "+detail)
	return nil
}

// A NoteQueue never blocks its caller: notes wait in order, at most Size
// of them; one more is dropped and counted; Close sends what waits.
func TestNoteQueue_BoundedInOrder(t *testing.T) {
	l := &gateLeader{entered: make(chan struct{}), release: make(chan struct{})}
	dropped := 0
	q := &NoteQueue{Leader: l, Node: "n1", Size: 2, Logger: slog.New(slog.DiscardHandler), Dropped: func() { dropped++ }}
	if err := q.Open(); err != nil {
		t.Fatal(err)
	}
	if !q.Add("a.1", "store_refused", "one") {
		t.Fatal("the first note was dropped")
	}
	<-l.entered // the sender holds note one: two more fit
	for i, want := range []bool{true, true, false, false} {
		if got := q.Add("a.1", "store_refused", string(rune('2'+i))); got != want {
			t.Errorf("note %d queued = %v, want %v", i+2, got, want)
		}
	}
	if dropped != 2 {
		t.Errorf("%d drops counted, want 2", dropped)
	}
	go func() {
		l.release <- struct{}{} // one
		for range 2 {
			<-l.entered
			l.release <- struct{}{} // two, three
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"a.1 store_refused n1 one", "a.1 store_refused n1 2", "a.1 store_refused n1 3"}
	if !slices.Equal(l.notes, want) {
		t.Errorf("the leader got %q, want %q", l.notes, want)
	}
	if q.Add("a.1", "store_refused", "late") {
		t.Error("a note was queued after Close")
	}
}

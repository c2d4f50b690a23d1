package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// DefaultNoteQueueSize is how many notes a NoteQueue holds by default.
const DefaultNoteQueueSize = 256

// noteTimeout bounds one note's trip to the leader (the scheduler's
// forwarder retries within it while the leader changes).
const noteTimeout = 30 * time.Second

// NoteQueue tells the leader what a node saw about attempts it does not
// run itself (the store's refusals of a job's own publish), in the
// background and in order, without holding up the caller: Add never
// blocks. At most Size notes wait; one that finds the queue full is
// dropped, logged and counted through Dropped. One goroutine sends them,
// each once (a note is not idempotent: sent twice, it counts twice).
type NoteQueue struct {
	Leader Leader
	// Node is the name the notes are sent as.
	Node string
	// Size bounds the notes waiting; 0 means DefaultNoteQueueSize.
	Size   int
	Logger *slog.Logger
	// Dropped, if set, is called for each note dropped on a full queue.
	Dropped func()

	mu     sync.Mutex
	ch     chan queuedNote
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

type queuedNote struct{ attempt, kind, detail string }

// Open starts sending.
func (q *NoteQueue) Open() error {
	if q.Leader == nil {
		return errors.New("note queue: a leader is required")
	}
	if q.Logger == nil {
		q.Logger = slog.Default()
	}
	size := q.Size
	if size <= 0 {
		size = DefaultNoteQueueSize
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ch = make(chan queuedNote, size)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	q.done = make(chan struct{})
	go q.loop(q.ch)
	return nil
}

// Add queues a note of kind about attempt; it reports false if the note
// was dropped (the queue full, or not open).
func (q *NoteQueue) Add(attempt, kind, detail string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ch == nil || q.ctx.Err() != nil {
		return false
	}
	select {
	case q.ch <- queuedNote{attempt, kind, detail}:
		return true
	default:
	}
	q.Logger.Warn("too many notes waiting for the leader: dropped one", jobs.AttemptLogArgs(attempt, "kind", kind, "detail", detail, "waiting", cap(q.ch))...)
	if q.Dropped != nil {
		q.Dropped()
	}
	return false
}

// Close sends what is queued until ctx ends, then stops; notes still
// waiting then are lost.
func (q *NoteQueue) Close(ctx context.Context) error {
	q.mu.Lock()
	if q.ch == nil {
		q.mu.Unlock()
		return nil
	}
	ch := q.ch
	q.ch = nil
	q.mu.Unlock()
	close(ch) // Add sends under mu and sees q.ch nil from now on
	select {
	case <-q.done:
		q.cancel()
		return nil
	case <-ctx.Done():
		q.cancel()
		<-q.done
		return fmt.Errorf("note queue close: %w", ctx.Err())
	}
}

func (q *NoteQueue) loop(ch <-chan queuedNote) {
	defer close(q.done)
	for n := range ch {
		ctx, cancel := context.WithTimeout(q.ctx, noteTimeout)
		err := q.Leader.Note(ctx, n.attempt, n.kind, q.Node, n.detail)
		cancel()
		if err != nil {
			q.Logger.Warn("could not tell the leader", jobs.AttemptLogArgs(n.attempt, "kind", n.kind, "detail", n.detail, "err", err)...)
		}
	}
}

package agent

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
)

// lockedBuffer is a log destination the closers' goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func shutdownNode(t *testing.T) (*node, *lockedBuffer) {
	cfg := config.Defaults()
	cfg.Node.DataDir = t.TempDir()
	var log lockedBuffer
	return &node{cfg: cfg, log: slog.New(slog.NewTextHandler(&log, nil))}, &log
}

// A part that does not stop within the budget is named in the log, with
// the stacks of every goroutine, and the node exits without it and the
// parts opened before it (they may be in its use), as after a crash,
// instead of hanging until a supervisor kills it.
func TestShutdown_StuckPartIsNamedAndTheNodeStopsWaiting(t *testing.T) {
	n, log := shutdownNode(t)
	var stopped []string // appended to only by closers shutdown waited for
	release, released := make(chan struct{}), make(chan struct{})
	n.closeWith("store", func(context.Context) error { stopped = append(stopped, "store"); return nil })
	n.closeWith("raft", func(context.Context) error { defer close(released); <-release; return nil })
	n.closeWith("worker", func(context.Context) error { stopped = append(stopped, "worker"); return nil })

	err := n.shutdown(100 * time.Millisecond)
	close(release)
	<-released
	if err == nil || !strings.Contains(err.Error(), "raft") {
		t.Errorf("shutdown cut short returned %v; want an error naming raft, so the process exits as failed", err)
	}

	if !slices.Equal(stopped, []string{"worker"}) {
		t.Errorf("stopped %q, want only the worker, closed before the stuck part", stopped)
	}
	out := log.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "part=raft") || !strings.Contains(out, "not_stopped=[store]") {
		t.Errorf("log does not name the stuck part and what was left:\n%s", out)
	}
	if strings.Contains(out, `msg=stopped`) {
		t.Errorf("a shutdown cut short logged a clean stop:\n%s", out)
	}
	stacks, err := os.ReadFile(n.cfg.Node.DataDir + "/shutdown-goroutines.txt")
	if err != nil || !bytes.Contains(stacks, []byte("TestShutdown_StuckPartIsNamedAndTheNodeStopsWaiting")) {
		t.Errorf("goroutine stacks: %v\n%.500s", err, stacks)
	}
}

// A part that gives up when its context ends is a failed stop, not a
// stuck one: the others still stop.
func TestShutdown_PartThatHonoursTheBudgetIsNotLeftBehind(t *testing.T) {
	n, log := shutdownNode(t)
	var stopped []string
	n.closeWith("store", func(context.Context) error { stopped = append(stopped, "store"); return nil })
	n.closeWith("web server", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	if err := n.shutdown(100 * time.Millisecond); err != nil {
		t.Errorf("shutdown = %v; a part that failed to stop is logged, not a stop cut short", err)
	}
	if !slices.Equal(stopped, []string{"store"}) {
		t.Errorf("stopped %q, want the store too", stopped)
	}
	if out := log.String(); !strings.Contains(out, "part=\"web server\"") || !strings.Contains(out, "msg=stopped") {
		t.Errorf("log:\n%s", out)
	}
}

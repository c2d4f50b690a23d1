package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/api"
)

// panickingOperator panics in RestoreSnapshot, as the FSM's restore did
// on a snapshot it could not index.
type panickingOperator struct{ api.Operator }

func (panickingOperator) RestoreSnapshot(context.Context, io.Reader) (wire.Restored, error) {
	var run *struct{ Job string }
	return wire.Restored{Jobs: len(run.Job)}, nil // a nil pointer, as in indexRuns
}

// syncBuffer is a bytes.Buffer a logger and a test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServer_HandlerPanicIsLoggedAndAnswered500: a handler that panics
// answers the client with a 500 and logs the panic at ERROR with its
// stack; the server goes on serving.
func TestServer_HandlerPanicIsLoggedAndAnswered500(t *testing.T) {
	var logs syncBuffer
	f := newFixture(t, func(s *Server) {
		s.Operator = panickingOperator{}
		s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	code, _, body := f.do(t, http.MethodPut, "/api/v1/snapshot", "{}")
	var answer struct{ Error string }
	if err := json.Unmarshal([]byte(body), &answer); err != nil || code != http.StatusInternalServerError || !strings.Contains(answer.Error, "internal error") {
		t.Errorf("answer %d %s (%v); want a 500 that says the node logged an internal error", code, body, err)
	}
	log := logs.String()
	if !strings.Contains(log, "level=ERROR") || !strings.Contains(log, `msg="request handler panicked"`) ||
		!strings.Contains(log, "nil pointer") || !strings.Contains(log, "panickingOperator.RestoreSnapshot") {
		t.Errorf("log:\n%s\nwant an ERROR line with the panic and a stack naming the handler", log)
	}
	if code, _, _ := f.do(t, http.MethodGet, "/healthz", ""); code != http.StatusOK {
		t.Errorf("after the panic /healthz answers %d", code)
	}
}

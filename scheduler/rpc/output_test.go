package rpc

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// outputWorker is a worker that takes assignments and answers for the
// output of one attempt.
type outputWorker struct{ attempt, text string }

func (outputWorker) Accept(worker.Assignment) error { return nil }
func (w outputWorker) Output(req worker.OutputRequest) (worker.LiveOutput, error) {
	if req.Attempt != w.attempt {
		return worker.LiveOutput{}, fmt.Errorf("attempt %s: %w", req.Attempt, jobs.ErrNotFound)
	}
	text := w.text[min(int(req.StdoutFrom), len(w.text)):]
	return worker.LiveOutput{Attempt: req.Attempt, Node: "w2", Running: true,
		Stdout: worker.OutputChunk{Text: text, From: req.StdoutFrom, Next: int64(len(w.text))}}, nil
}

// A node asks another's worker for a running attempt's output over the
// cluster's TLS, from an offset; an attempt the worker no longer runs
// comes back as not found; a stranger gets nothing.
func TestClient_AttemptOutput(t *testing.T) {
	srv := &Server{Worker: outputWorker{attempt: "talk@x.1", text: "line one\nline two\n"}}
	addr := stub(t, srv)
	c := &Client{Self: "n1", TLS: clientID, NodeHTTP: func(node string) (string, error) {
		if node != "w2" {
			return "", fmt.Errorf("unknown node %s", node)
		}
		return addr, nil
	}}
	out, err := c.AttemptOutput(t.Context(), "w2", worker.OutputRequest{Attempt: "talk@x.1", StdoutFrom: 9})
	if err != nil || out.Stdout.Text != "line two\n" || out.Stdout.Next != 18 || !out.Running || out.Node != "w2" {
		t.Fatalf("output from offset 9: %+v, %v", out, err)
	}
	if _, err := c.AttemptOutput(t.Context(), "w2", worker.OutputRequest{Attempt: "gone@x.1"}); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("an attempt the worker no longer runs: %v, want ErrNotFound", err)
	}
	if code, body := serve(t, srv, "POST", "/internal/v1/output", `{"attempt":"talk@x.1"}`, nil); code != 401 || strings.Contains(body, "line") {
		t.Errorf("a stranger asking for output = %d %s, want 401 and nothing of it", code, body)
	}
	// A node that runs no jobs has no output to give.
	if _, err := (&Client{Self: "n1", TLS: clientID, NodeHTTP: func(string) (string, error) { return stub(t, &Server{}), nil }}).
		AttemptOutput(t.Context(), "s1", worker.OutputRequest{Attempt: "talk@x.1"}); !errors.Is(err, jobs.ErrNotFound) {
		t.Errorf("a node without a worker: %v, want ErrNotFound", err)
	}
	// This node's own worker answers without the network.
	local := &Client{Self: "w2", Local: outputWorker{attempt: "talk@x.1", text: "here\n"}, NodeHTTP: func(string) (string, error) { return "", errors.New("no network") }}
	if out, err := local.AttemptOutput(t.Context(), "w2", worker.OutputRequest{Attempt: "talk@x.1"}); err != nil || out.Stdout.Text != "here\n" {
		t.Errorf("own worker: %+v, %v", out, err)
	}
}

// A leader of an older release decodes completions strictly and refuses
// stdout_tail (log version 3) or never_started (version 4), fields it
// does not know: the worker reports again without them rather than lose
// the completion.
func TestClient_CompleteToAnOlderLeader(t *testing.T) {
	for _, field := range []string{"stdout_tail", "never_started"} {
		var mu sync.Mutex
		var bodies []string
		addr := stub(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
			if strings.Contains(string(b), field) {
				writeJSON(w, http.StatusBadRequest, wire.Body(fmt.Errorf("%w: decode /complete body: json: unknown field %q", wire.ErrBadRequest, field)))
				return
			}
			writeJSON(w, http.StatusOK, done{})
		}))
		c := &Client{Self: "w1", TLS: clientID, LeaderHTTP: func() (string, error) { return addr, nil }}
		comp := replicated.Completion{Attempt: "a@x.1", State: jobs.Succeeded, StdoutTail: "hi\n"}
		if field == "never_started" {
			comp = replicated.Completion{Attempt: "a@x.1", State: jobs.Lost, NeverStarted: true}
		}
		err := c.Complete(t.Context(), comp)
		mu.Lock()
		if err != nil || len(bodies) != 2 || strings.Contains(bodies[1], field) {
			t.Errorf("complete to a leader that does not know %s: %v after %d calls %q; want a second call without it", field, err, len(bodies), bodies)
		}
		mu.Unlock()
	}
}

package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// An HTTP attempt keeps a command's fence order: it establishes its token
// at the store before sending anything, so an attempt the store already
// fenced sends no request at all; an established one sends the fence
// headers and publishes the response body with its token.
func TestWorker_HTTPJobEstablishesBeforeSending(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		w.Write([]byte("pong"))
	}))
	defer srv.Close()
	scheduled := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	run := func(t *testing.T, s fencedstore.Store) replicated.Completion {
		l := holdingLeader{done: make(chan replicated.Completion, 1)}
		w := &Worker{ID: "w1", Store: s, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler),
			TokenText: func(a Assignment) string { return "signed-" + a.Attempt.Token.String() }}
		if err := w.Open(); err != nil {
			t.Fatal(err)
		}
		defer w.Close(context.Background())
		spec := jobs.Spec{Name: "ping", HTTP: &jobs.HTTP{URL: srv.URL + "/hook"}, Output: "pings/{{ .RunID }}",
			Timeout: jobs.Duration(10 * time.Second), LeaseTTL: jobs.Duration(5 * time.Second), MaxOutputBytes: 1 << 20}
		a := Assignment{Run: jobs.Run{ID: jobs.RunID("ping", scheduled), Job: "ping", ScheduledAt: scheduled, Output: "pings/x"}, Spec: spec,
			Attempt: jobs.Attempt{ID: jobs.RunID("ping", scheduled) + ".1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 3, Seq: 9}, GrantedAt: time.Now()}}
		if err := w.Accept(a); err != nil {
			t.Fatal(err)
		}
		return l.completion(t)
	}

	fenced := &funcStore{
		establish: func(req fencedstore.EstablishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.StaleOwner, Key: req.Key, Greatest: fencedstore.Token{Epoch: 4, Seq: 1}},
				fmt.Errorf("%s: %w", req.Key, fencedstore.ErrStaleOwner)
		},
	}
	if c := run(t, fenced); c.State != jobs.Fenced {
		t.Errorf("fenced at establish: completion %+v, want fenced", c)
	}
	mu.Lock()
	if len(got) != 0 {
		t.Errorf("a fenced attempt sent %d requests, want none", len(got))
	}
	mu.Unlock()

	ok := &funcStore{
		establish: func(req fencedstore.EstablishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Established, Key: req.Key, Greatest: req.Token}, nil
		},
		publish: func(req fencedstore.PublishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Applied, Key: req.Key, Version: 1, Greatest: req.Token}, nil
		},
	}
	c := run(t, ok)
	if c.State != jobs.Succeeded || c.ExitCode != nil {
		t.Errorf("completion %+v, want succeeded without an exit code", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Get("Fencecron-Token") != "signed-3.9" || got[0].Get("Fencecron-Run-Id") != "ping@20260701T090000Z" || got[0].Get("Fencecron-Scheduled-At") != "2026-07-01T09:00:00Z" {
		t.Errorf("requests %v, want one with the three fence headers", got)
	}
	ok.mu.Lock()
	defer ok.mu.Unlock()
	if len(ok.establishs) != 1 || len(ok.publishes) != 1 || string(ok.publishes[0].Body) != "pong" || ok.publishes[0].Token != (fencedstore.Token{Epoch: 3, Seq: 9}) {
		t.Errorf("store calls: %d establishes, publishes %+v; want 1 and one of %q with token 3.9", len(ok.establishs), ok.publishes, "pong")
	}
}

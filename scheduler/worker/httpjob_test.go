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

// An HTTP job's run granted ahead builds its request (the signed token
// among its headers) while it waits for the fire time, and only sends at
// the fire time: the clock, stopped at the fire time once the attempt
// waits for it, reads before it when the token is rendered and at it
// when the request arrives.
func TestWorker_HTTPJobBuiltBeforeTheFireTime(t *testing.T) {
	script := make([]*renewAnswer, 1000)
	for i := range script {
		script[i] = held
	}
	f := newLeaseFixture(t, script...)
	fireAt := leaseT0.Add(PreGrantLead)
	var (
		mu                  sync.Mutex
		renderedAt, arrived []time.Time
		tokens              []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		arrived = append(arrived, f.clock.Now())
		tokens = append(tokens, r.Header.Get(jobs.HTTPTokenHeader))
	}))
	defer srv.Close()
	f.w.TokenText = func(a Assignment) string {
		mu.Lock()
		defer mu.Unlock()
		renderedAt = append(renderedAt, f.clock.Now())
		return "signed-" + a.Attempt.Token.String()
	}
	a := Assignment{
		Run:     jobs.Run{ID: "ping@x", Job: "ping", Trigger: "schedule", ScheduledAt: fireAt},
		Spec:    jobs.Spec{Name: "ping", HTTP: &jobs.HTTP{URL: srv.URL + "/hook"}, Timeout: jobs.Duration(time.Minute), LeaseTTL: jobs.Duration(testTTL)},
		Attempt: jobs.Attempt{ID: "ping@x.1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 1, Seq: 7}, GrantedAt: leaseT0},
	}
	if err := f.w.Accept(a); err != nil {
		t.Fatal(err)
	}
	c := f.completionBy(t, fireAt.Add(startSlack))
	if c.State != jobs.Succeeded || c.StartedAt.Before(fireAt) {
		t.Errorf("completion %+v: want succeeded, started at or after the fire time %s", c, fireAt)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(renderedAt) != 1 || !renderedAt[0].Before(fireAt) {
		t.Errorf("token rendered at %v: want once, before the fire time %s", renderedAt, fireAt)
	}
	if len(arrived) != 1 || arrived[0].Before(fireAt) || tokens[0] != "signed-1.7" {
		t.Errorf("requests arrived at %v with tokens %q: want one, at the fire time %s, with %q", arrived, tokens, fireAt, "signed-1.7")
	}
}

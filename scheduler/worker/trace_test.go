package worker

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// With tracing on, the job joins the run's trace: an HTTP job's request
// carries a traceparent naming its request span, a process job's
// TRACEPARENT names its process span, both in the run's trace under the
// attempt span; the request span records the status, the process span the
// exit code.
func TestWorker_TracedJobsGetTheirSpansContext(t *testing.T) {
	var mu sync.Mutex
	var header string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		header = r.Header.Get("traceparent")
		mu.Unlock()
		w.Write([]byte("pong"))
	}))
	defer srv.Close()
	scheduled := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	store := &funcStore{
		establish: func(req fencedstore.EstablishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Established, Key: req.Key, Greatest: req.Token}, nil
		},
		publish: func(req fencedstore.PublishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Applied, Key: req.Key, Version: 1, Greatest: req.Token}, nil
		},
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(runtrace.IDGenerator{}), sdktrace.WithSampler(runtrace.Sampler(1)))
	run := func(t *testing.T, name string, spec jobs.Spec) {
		l := holdingLeader{done: make(chan replicated.Completion, 1)}
		w := &Worker{ID: "w1", Store: store, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler), Tracer: runtrace.New(tp)}
		if err := w.Open(); err != nil {
			t.Fatal(err)
		}
		defer w.Close(context.Background())
		spec.Name, spec.Output = name, name+"/out"
		spec.Timeout, spec.LeaseTTL, spec.MaxOutputBytes = jobs.Duration(10*time.Second), jobs.Duration(5*time.Second), 1<<20
		id := jobs.RunID(name, scheduled)
		a := Assignment{Run: jobs.Run{ID: id, Job: name, ScheduledAt: scheduled, Output: name + "/out"}, Spec: spec,
			Attempt: jobs.Attempt{ID: id + ".1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 3, Seq: 9}, GrantedAt: time.Now()}}
		if err := w.Accept(a); err != nil {
			t.Fatal(err)
		}
		if c := l.completion(t); c.State != jobs.Succeeded {
			t.Fatalf("%s: completion %+v", name, c)
		}
	}
	run(t, "ping", jobs.Spec{HTTP: &jobs.HTTP{URL: srv.URL + "/hook"}})
	run(t, "env", jobs.Spec{Shell: `printf %s "$TRACEPARENT"`})

	span := func(name, job string) sdktrace.ReadOnlySpan {
		t.Helper()
		for _, s := range rec.Ended() {
			if s.Name() == name && s.SpanContext().TraceID() == runtrace.TraceID(jobs.RunID(job, scheduled)) {
				return s
			}
		}
		t.Fatalf("no %s span in %s's trace", name, job)
		return nil
	}
	traceparent := func(s sdktrace.ReadOnlySpan) string {
		return "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
	}
	httpSpan, procSpan := span(runtrace.SpanHTTP, "ping"), span(runtrace.SpanProcess, "env")
	mu.Lock()
	if header != traceparent(httpSpan) {
		t.Errorf("the HTTP job's traceparent %q, want its request span's %q", header, traceparent(httpSpan))
	}
	mu.Unlock()
	store.mu.Lock()
	var body string
	for _, p := range store.publishes {
		if p.Key == "env/out" {
			body = string(p.Body)
		}
	}
	store.mu.Unlock()
	if body != traceparent(procSpan) {
		t.Errorf("the process job's TRACEPARENT %q, want its process span's %q", body, traceparent(procSpan))
	}
	for _, c := range []struct {
		s         sdktrace.ReadOnlySpan
		job, attr string
		want      int64
	}{{httpSpan, "ping", runtrace.AttrHTTPStatus, 200}, {procSpan, "env", runtrace.AttrExitCode, 0}} {
		if c.s.Parent().SpanID() != span(runtrace.SpanAttempt, c.job).SpanContext().SpanID() {
			t.Errorf("%s's %s span is not under its attempt span", c.job, c.s.Name())
		}
		found := false
		for _, kv := range c.s.Attributes() {
			if string(kv.Key) == c.attr && kv.Value.AsInt64() == c.want {
				found = true
			}
		}
		if !found {
			t.Errorf("%s's %s span has no %s=%d: %v", c.job, c.s.Name(), c.attr, c.want, c.s.Attributes())
		}
	}
}

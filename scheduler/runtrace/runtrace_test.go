package runtrace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

var t0 = time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)

func newTracer() (*runtrace.Tracer, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(runtrace.IDGenerator{}), sdktrace.WithSampler(runtrace.Sampler(1)))
	return runtrace.New(tp), rec
}

func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string, n int) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) <= n {
		t.Fatalf("%d %q spans, want at least %d", len(found), name, n+1)
	}
	return found[n]
}

// A run's trace is the same on every node: the first leader's fired span
// is its root, with ids derived from the run id, and a later leader that
// never saw that span grants the takeover under it, in the same trace; a
// worker's attempt span is the child of the dispatch that carried it.
func TestTracer_OneTracePerRunAcrossLeaders(t *testing.T) {
	run := jobs.Run{ID: "report@20260701T090000Z", Job: "report", ScheduledAt: t0}
	first := jobs.Attempt{ID: run.ID + ".1", Number: 1, Token: jobs.Fence{Epoch: 2, Seq: 7}, Worker: "w1", GrantedAt: t0}
	second := jobs.Attempt{ID: run.ID + ".2", Number: 2, Token: jobs.Fence{Epoch: 3, Seq: 19}, Worker: "w2", GrantedAt: t0.Add(5 * time.Second)}

	leaderA, recA := newTracer()
	d := leaderA.Granted(run, first, t0.Add(time.Millisecond))
	tp := d.TraceParent()
	d.End(nil)
	leaderB, recB := newTracer() // elected later: knows only the run id
	leaderB.Granted(run, second, second.GrantedAt.Add(time.Millisecond)).End(nil)
	worker, recW := newTracer()
	att := worker.Attempt(context.Background(), run, first, tp)
	att.End(nil)

	fired := spanNamed(t, recA, runtrace.SpanFired, 0)
	if got, want := fired.SpanContext().TraceID(), runtrace.TraceID(run.ID); got != want {
		t.Errorf("fired trace id %s, want %s", got, want)
	}
	if got, want := fired.SpanContext().SpanID(), runtrace.RootSpanID(run.ID); got != want || fired.Parent().IsValid() {
		t.Errorf("fired span id %s (parent %s), want the root %s", got, fired.Parent().SpanID(), want)
	}
	g1 := spanNamed(t, recA, runtrace.SpanGranted, 0)
	g2 := spanNamed(t, recB, runtrace.SpanGranted, 0)
	for _, g := range []sdktrace.ReadOnlySpan{g1, g2} {
		if g.SpanContext().TraceID() != runtrace.TraceID(run.ID) || g.Parent().SpanID() != runtrace.RootSpanID(run.ID) {
			t.Errorf("granted span %v: trace %s parent %s, want the run's trace under fired", g.Attributes(), g.SpanContext().TraceID(), g.Parent().SpanID())
		}
	}
	if len(recB.Ended()) != 2 { // granted and dispatched, no second fired
		t.Errorf("the later leader made %d spans, want granted and dispatched", len(recB.Ended()))
	}
	a := spanNamed(t, recW, runtrace.SpanAttempt, 0)
	disp := spanNamed(t, recA, runtrace.SpanDispatched, 0)
	if a.Parent().SpanID() != disp.SpanContext().SpanID() || a.SpanContext().TraceID() != runtrace.TraceID(run.ID) {
		t.Errorf("attempt span's parent %s, want the dispatched span %s", a.Parent().SpanID(), disp.SpanContext().SpanID())
	}
	// Without a traceparent (a dispatch from an older leader), the
	// worker's attempt still joins the run's trace.
	worker.Attempt(context.Background(), run, second, "").End(nil)
	if a2 := spanNamed(t, recW, runtrace.SpanAttempt, 1); a2.SpanContext().TraceID() != runtrace.TraceID(run.ID) {
		t.Errorf("attempt without traceparent in trace %s, want the run's", a2.SpanContext().TraceID())
	}
}

// With tracing off (a nil Tracer) the leader's grant path allocates
// nothing for tracing.
func TestTracer_NilAllocatesNothing(t *testing.T) {
	var tr *runtrace.Tracer
	run := jobs.Run{ID: "r@x", Job: "r"}
	att := jobs.Attempt{ID: "r@x.1", Number: 1}
	if n := testing.AllocsPerRun(100, func() {
		s := tr.Granted(run, att, t0)
		_ = s.TraceParent()
		s.End(nil)
		a := tr.Attempt(context.Background(), run, att, "")
		p := tr.Plan(a.Context(context.Background()))
		_ = p.TraceParent()
		p.Start(runtrace.SpanHTTP, trace.SpanKindClient, t0).End(nil)
		a.End(nil)
	}); n != 0 {
		t.Errorf("a nil tracer allocates %v per grant", n)
	}
}

// While tracing is on, every log line naming a run names its trace, once.
func TestLogHandler_AddsTheRunsTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(runtrace.LogHandler(slog.NewJSONHandler(&buf, nil)))
	run := "report@20260701T090000Z"
	want := runtrace.TraceID(run).String()
	log.Info("granted", jobs.LogRunID, run)
	log.With(jobs.LogRunID, run).Info("published")
	log.With(jobs.LogRunID, run, runtrace.LogTraceID, "given").Info("attempt finished")
	log.Info("leading")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	for i, wantID := range []string{want, want, "given", ""} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatal(err)
		}
		if got, _ := m[runtrace.LogTraceID].(string); got != wantID {
			t.Errorf("line %d trace_id %q, want %q: %s", i, got, wantID, lines[i])
		}
		if got, _ := m[runtrace.LogSpanID].(string); wantID == want && got != runtrace.RootSpanID(run).String() {
			t.Errorf("line %d span_id %q, want the run's root span %s: %s", i, got, runtrace.RootSpanID(run), lines[i])
		}
		if strings.Count(lines[i], `"trace_id"`) > 1 {
			t.Errorf("line %d names its trace twice: %s", i, lines[i])
		}
	}
}

// A sample ratio takes or leaves whole runs: the leader that fired a run
// and a later one granting its takeover decide alike, by the run id.
func TestSampler_SameChoiceOnEveryNode(t *testing.T) {
	traced := func(run jobs.Run, att jobs.Attempt) bool {
		rec := tracetest.NewSpanRecorder()
		tr := runtrace.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(runtrace.IDGenerator{}), sdktrace.WithSampler(runtrace.Sampler(0.5))))
		tr.Granted(run, att, t0).End(nil)
		return len(rec.Ended()) > 0
	}
	taken := 0
	for i := range 200 {
		run := jobs.Run{ID: jobs.RunID("j", t0.Add(time.Duration(i)*time.Second)), Job: "j"}
		first, second := traced(run, jobs.Attempt{ID: run.ID + ".1", Number: 1}), traced(run, jobs.Attempt{ID: run.ID + ".2", Number: 2})
		if first != second {
			t.Errorf("run %s: first attempt traced %v, takeover %v", run.ID, first, second)
		}
		if first {
			taken++
		}
	}
	if taken < 50 || taken > 150 {
		t.Errorf("%d of 200 runs traced at ratio 0.5", taken)
	}
}

// A planned span starts later with the ids its traceparent already
// named, under its parent, at the time it is given; a span started under
// it gets ids of its own.
func TestTracer_PlannedSpanIsTheOneItsTraceParentNames(t *testing.T) {
	tr, rec := newTracer()
	run := jobs.Run{ID: "ping@20260701T090000Z", Job: "ping", ScheduledAt: t0}
	att := tr.Attempt(context.Background(), run, jobs.Attempt{ID: run.ID + ".1", Number: 1}, "")
	p := tr.Plan(att.Context(context.Background()))
	tp := p.TraceParent()
	req := p.Start(runtrace.SpanHTTP, trace.SpanKindClient, t0)
	tr.Start(req.Context(context.Background()), "child", trace.SpanKindInternal).End(nil)
	req.End(nil)
	att.End(nil)
	got := spanNamed(t, rec, runtrace.SpanHTTP, 0)
	sc := got.SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; tp != want {
		t.Errorf("planned traceparent %q, want the started span's %q", tp, want)
	}
	if got.Parent().SpanID() != spanNamed(t, rec, runtrace.SpanAttempt, 0).SpanContext().SpanID() || !got.StartTime().Equal(t0) {
		t.Errorf("planned span under %s from %v; want under the attempt, from %v", got.Parent().SpanID(), got.StartTime(), t0)
	}
	if child := spanNamed(t, rec, "child", 0); child.SpanContext().SpanID() == sc.SpanID() || child.Parent().SpanID() != sc.SpanID() {
		t.Errorf("a span under the planned one has ids %s (parent %s), want its own under %s", child.SpanContext().SpanID(), child.Parent().SpanID(), sc.SpanID())
	}
}

// A run the sampler leaves out is recorded nowhere, and the dispatch
// says so: the worker and its job's span record nothing either.
func TestTracer_UnsampledRunRecordsNothing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := runtrace.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(runtrace.IDGenerator{}), sdktrace.WithSampler(runtrace.Sampler(0))))
	run := jobs.Run{ID: "ping@20260701T090000Z", Job: "ping", ScheduledAt: t0}
	for _, n := range []int{1, 2} {
		att := jobs.Attempt{ID: run.ID + "." + strconv.Itoa(n), Number: n}
		d := tr.Granted(run, att, t0)
		tp := d.TraceParent()
		d.End(nil)
		a := tr.Attempt(context.Background(), run, att, tp)
		p := tr.Plan(a.Context(context.Background()))
		p.Start(runtrace.SpanHTTP, trace.SpanKindClient, t0).End(nil)
		a.End(nil)
		if !strings.HasSuffix(tp, "-00") || !strings.HasSuffix(p.TraceParent(), "-00") {
			t.Errorf("attempt %d: dispatch traceparent %q, request's %q; want both unsampled", n, tp, p.TraceParent())
		}
	}
	if got := rec.Ended(); len(got) != 0 {
		t.Errorf("%d spans recorded of an unsampled run, want none", len(got))
	}
}

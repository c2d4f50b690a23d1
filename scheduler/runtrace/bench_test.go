package runtrace_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// BenchmarkRun_Spans is the making of one HTTP job's run's spans, as the
// leader and a worker make them (fired, granted, dispatched; attempt,
// http request, completed), batched to an exporter that drops them. What
// sending them adds: cmd/internal/telemetry's BenchmarkBatch_RunSpans.
func BenchmarkRun_Spans(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithIDGenerator(runtrace.IDGenerator{}), sdktrace.WithSampler(runtrace.Sampler(1)))
	defer tp.Shutdown(context.Background())
	leader, worker := runtrace.New(tp), runtrace.New(tp)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		at := t0.Add(time.Duration(i) * time.Second)
		run := jobs.Run{ID: "h001@" + strconv.Itoa(i), Job: "h001", ScheduledAt: at, Trigger: "schedule"}
		att := jobs.Attempt{ID: run.ID + ".1", Number: 1, Token: jobs.Fence{Epoch: 2, Seq: uint64(i)}, Worker: "w1", GrantedAt: at.Add(-500 * time.Millisecond)}
		d := leader.Granted(run, att, at.Add(-490*time.Millisecond))
		tp := d.TraceParent()
		d.End(nil)
		span := worker.Attempt(context.Background(), run, att, tp)
		p := worker.Plan(span.Context(context.Background()))
		_ = p.TraceParent()
		p.Start(runtrace.SpanHTTP, trace.SpanKindClient, at).End(nil)
		worker.Start(span.Context(context.Background()), runtrace.SpanCompleted, trace.SpanKindClient).End(nil)
		span.End(nil)
	}
}

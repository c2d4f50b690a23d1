package runtrace_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencecron/fencecron/scheduler/runtrace"
	"github.com/fencecron/fencecron/scheduler/runtrace/runtracetest"
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
		runtracetest.HTTPRun(leader, worker, t0, i)
	}
}

package scheduler

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// BenchmarkLeader_GrantAndDispatchTraced is BenchmarkLeader_GrantAndDispatch
// with tracing on, every run sampled, spans batched to an exporter that
// drops them: what the leader's three spans of a grant cost.
func BenchmarkLeader_GrantAndDispatchTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tp.Shutdown(b.Context())
	benchGrantAndDispatch(b, func(s *Scheduler) { s.Tracer = runtrace.New(tp) })
}

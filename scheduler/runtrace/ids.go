package runtrace

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// IDGenerator is the SDK's ID generator (sdktrace.WithIDGenerator) for
// fencecron's traces: a run's root span gets the ids derived from its
// run id (TraceID, RootSpanID), a planned span (Tracer.Plan) the id
// chosen for it, every other span random ones.
type IDGenerator struct{}

// NewIDs implements the SDK's IDGenerator.
func (IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if run, ok := RunFrom(ctx); ok {
		return runIDs(run)
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

// NewSpanID implements the SDK's IDGenerator.
func (IDGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if sid, ok := plannedSpanID(ctx); ok {
		return sid
	}
	return newSpanID()
}

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// Sampler is the sampler of fencecron's traces: it takes ratio of the
// runs, by their trace id, so every node takes or leaves the same runs,
// whether it has the trace context (a dispatch) or only the run id (a
// takeover granted by a later leader, whose parent is the run's root
// span as a remote context without a sampled flag).
func Sampler(ratio float64) sdktrace.Sampler {
	r := sdktrace.TraceIDRatioBased(ratio)
	return sdktrace.ParentBased(r, sdktrace.WithRemoteParentNotSampled(r))
}

// Package runtrace makes the OpenTelemetry spans of runs: one trace per
// run, across the leader that granted it, the worker that ran it, the
// node serving the store that judged its writes, and the job itself.
//
// A run's trace id, and the span id of its root span ("fired"), are
// derived from the run id (TraceID, RootSpanID). A leader elected after
// the first one, granting a retry or a takeover, has never heard of the
// trace the first leader began, yet its spans join it: the run id is all
// a node needs. The trace context of an attempt travels with its
// dispatch (the worker's Assignment, never the replicated log), and from
// the worker to the store and the job as W3C traceparent.
//
// A nil *Tracer is tracing off: every method then does nothing and
// allocates nothing, so the grant and dispatch paths cost what they cost
// before tracing existed.
package runtrace

import (
	"context"
	"crypto/sha256"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencecron/fencecron/jobs"
)

// Name is the instrumentation scope of fencecron's spans.
const Name = "github.com/fencecron/fencecron"

// Span names.
const (
	SpanFired      = "fired"
	SpanGranted    = "granted"
	SpanDispatched = "dispatched"
	SpanAttempt    = "attempt"
	SpanEstablish  = "establish"
	SpanProcess    = "process"
	SpanHTTP       = "http request"
	SpanPublish    = "publish"
	SpanCompleted  = "completed"
	// EventRefused is the event a refused write's span carries.
	EventRefused = "write refused"
)

// Attribute keys.
const (
	AttrRunID       = "fencecron.run_id"
	AttrJob         = "fencecron.job"
	AttrAttempt     = "fencecron.attempt"
	AttrAttemptNo   = "fencecron.attempt.number"
	AttrToken       = "fencecron.token"
	AttrEpoch       = "fencecron.epoch"
	AttrSeq         = "fencecron.seq"
	AttrLogIndex    = "fencecron.log_index"
	AttrAhead       = "fencecron.ahead"
	AttrScheduledAt = "fencecron.scheduled_at"
	AttrWorker      = "fencecron.worker"
	AttrKey         = "fencecron.key"
	AttrOutcome     = "fencecron.store.outcome"
	AttrGreatest    = "fencecron.store.greatest"
	AttrState       = "fencecron.state"
	AttrExitCode    = "process.exit.code"
	AttrHTTPStatus  = "http.response.status_code"
)

// TraceID is the trace id of run runID: the same on every node.
func TraceID(runID string) trace.TraceID {
	var id trace.TraceID
	sum := sha256.Sum256([]byte("fencecron run\x00" + runID))
	copy(id[:], sum[:16])
	return id
}

// RootSpanID is the span id of run runID's root span, "fired".
func RootSpanID(runID string) trace.SpanID {
	var id trace.SpanID
	sum := sha256.Sum256([]byte("fencecron run\x00" + runID))
	copy(id[:], sum[16:24])
	return id
}

type runKey struct{}

// RunFrom returns the run whose root span is being started in ctx, for
// an ID generator that gives it its run's ids (see IDGenerator).
func RunFrom(ctx context.Context) (string, bool) {
	run, ok := ctx.Value(runKey{}).(string)
	return run, ok
}

// runContext is a context whose parent is run runID's root span, made by
// whichever leader fired it.
func runContext(ctx context.Context, runID string) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: TraceID(runID), SpanID: RootSpanID(runID), Remote: true})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

var propagator = propagation.TraceContext{}

// TraceParent is the W3C traceparent of the span in ctx; "" if none.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx with the remote parent a traceparent names
// (ctx unchanged if tp is empty or malformed).
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Propagator is the W3C trace-context propagator every hop uses.
func Propagator() propagation.TextMapPropagator { return propagator }

// Tracer makes the spans of runs. Nil is tracing off.
type Tracer struct{ t trace.Tracer }

// New returns a Tracer making spans with tp; nil (off) if tp is nil.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{t: tp.Tracer(Name)}
}

// Span is one span being made; nil when tracing is off (its methods then
// do nothing).
type Span struct {
	s   trace.Span
	ctx context.Context
}

// Context is ctx carrying the span, or parent itself for a nil Span.
func (s *Span) Context(parent context.Context) context.Context {
	if s == nil {
		return parent
	}
	return s.ctx
}

// TraceParent is the span's W3C traceparent; "" for a nil Span.
func (s *Span) TraceParent() string {
	if s == nil {
		return ""
	}
	return TraceParent(s.ctx)
}

// IDs are the span's trace and span ids, as logs name them; "" for a nil
// Span.
func (s *Span) IDs() (traceID, spanID string) {
	if s == nil {
		return "", ""
	}
	sc := s.s.SpanContext()
	return sc.TraceID().String(), sc.SpanID().String()
}

// SetAttributes adds attributes to the span.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	if s != nil {
		s.s.SetAttributes(kv...)
	}
}

// End ends the span; err, if not nil, marks it an error.
func (s *Span) End(err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// Start starts a span named name under ctx's span; nil for a nil Tracer.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, kv ...attribute.KeyValue) *Span {
	if t == nil {
		return nil
	}
	ctx, s := t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(kv...))
	return &Span{s: s, ctx: ctx}
}

func attemptAttrs(run jobs.Run, att jobs.Attempt) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(AttrRunID, run.ID), attribute.String(AttrJob, run.Job),
		attribute.String(AttrAttempt, att.ID), attribute.Int(AttrAttemptNo, att.Number),
		attribute.String(AttrToken, att.Token.String()), attribute.String(AttrWorker, att.Worker),
	}
}

// Granted records, on the leader, that att of run was granted: for a
// first attempt the run's root span "fired" (from the moment the leader
// fired it, att.GrantedAt, to now), then "granted" (the Raft entry: its
// epoch, seq and log index, and whether it was granted ahead of its
// time). It returns the "dispatched" span, started now, whose context
// the dispatch carries to the worker; End it when the worker took the
// attempt.
func (t *Tracer) Granted(run jobs.Run, att jobs.Attempt, now time.Time) *Span {
	if t == nil {
		return nil
	}
	ctx := context.Background()
	if att.Number <= 1 {
		var fired trace.Span
		ctx, fired = t.t.Start(context.WithValue(ctx, runKey{}, run.ID), SpanFired, trace.WithNewRoot(), trace.WithTimestamp(att.GrantedAt),
			trace.WithAttributes(attribute.String(AttrRunID, run.ID), attribute.String(AttrJob, run.Job),
				attribute.String(AttrScheduledAt, run.ScheduledAt.UTC().Format(time.RFC3339Nano)), attribute.String("fencecron.trigger", run.Trigger)))
		fired.End(trace.WithTimestamp(now))
	} else {
		ctx = runContext(ctx, run.ID)
	}
	attrs := append(attemptAttrs(run, att),
		attribute.Int64(AttrEpoch, int64(att.Token.Epoch)), attribute.Int64(AttrSeq, int64(att.Token.Seq)),
		attribute.Int64(AttrLogIndex, int64(att.Token.Seq)), attribute.Bool(AttrAhead, att.GrantedAt.Before(run.ScheduledAt)))
	ctx, granted := t.t.Start(ctx, SpanGranted, trace.WithTimestamp(att.GrantedAt), trace.WithAttributes(attrs...))
	granted.End(trace.WithTimestamp(now))
	ctx, d := t.t.Start(ctx, SpanDispatched, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attribute.String(AttrAttempt, att.ID), attribute.String(AttrWorker, att.Worker)))
	return &Span{s: d, ctx: ctx}
}

// Attempt starts, on the worker, the span of an attempt it accepted,
// under the dispatch's traceparent (or the run's root span if it has
// none). A retry or takeover is a new attempt span in the run's trace.
func (t *Tracer) Attempt(ctx context.Context, run jobs.Run, att jobs.Attempt, traceparent string) *Span {
	if t == nil {
		return nil
	}
	pctx := WithTraceParent(ctx, traceparent)
	if !trace.SpanContextFromContext(pctx).IsValid() {
		pctx = runContext(ctx, run.ID)
	}
	sctx, s := t.t.Start(pctx, SpanAttempt, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attemptAttrs(run, att)...))
	return &Span{s: s, ctx: sctx}
}

// Refused marks a write the store refused on s: an error, with an event
// that carries both tokens, the writer's and the store's greatest.
func (s *Span) Refused(outcome string, token, greatest jobs.Fence) {
	if s == nil {
		return
	}
	s.s.AddEvent(EventRefused, trace.WithAttributes(attribute.String(AttrOutcome, outcome),
		attribute.String(AttrToken, token.String()), attribute.String(AttrGreatest, greatest.String())))
	s.s.SetAttributes(attribute.String(AttrOutcome, outcome), attribute.String(AttrGreatest, greatest.String()))
	s.s.SetStatus(codes.Error, "the store refused the write: "+outcome)
}

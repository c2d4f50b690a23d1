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
	tid, _ := runIDs(runID)
	return tid
}

// RootSpanID is the span id of run runID's root span, "fired".
func RootSpanID(runID string) trace.SpanID {
	_, sid := runIDs(runID)
	return sid
}

// runIDs are run runID's trace id and root span id, from one hash.
func runIDs(runID string) (trace.TraceID, trace.SpanID) {
	var (
		tid trace.TraceID
		sid trace.SpanID
	)
	sum := sha256.Sum256([]byte("fencecron run\x00" + runID))
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	return tid, sid
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

// tpCarrier carries a traceparent alone, for Inject and Extract, without
// the map a propagation.MapCarrier would allocate on every dispatch.
type tpCarrier struct{ tp string }

func (c *tpCarrier) Get(key string) string {
	if key == "traceparent" {
		return c.tp
	}
	return ""
}

func (c *tpCarrier) Set(key, value string) {
	if key == "traceparent" {
		c.tp = value
	}
}

func (c *tpCarrier) Keys() []string { return []string{"traceparent"} }

// TraceParent is the W3C traceparent of the span in ctx; "" if none.
func TraceParent(ctx context.Context) string {
	var c tpCarrier
	propagator.Inject(ctx, &c)
	return c.tp
}

// WithTraceParent returns ctx with the remote parent a traceparent names
// (ctx unchanged if tp is empty or malformed).
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagator.Extract(ctx, &tpCarrier{tp: tp})
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
	ctx, s := t.t.Start(ctx, name, trace.WithSpanKind(kind))
	if len(kv) > 0 && s.IsRecording() {
		s.SetAttributes(kv...)
	}
	return &Span{s: s, ctx: ctx}
}

// attemptAttrs are an attempt's attributes, with room for extra more.
func attemptAttrs(run jobs.Run, att jobs.Attempt, extra int) []attribute.KeyValue {
	return append(make([]attribute.KeyValue, 0, 6+extra),
		attribute.String(AttrRunID, run.ID), attribute.String(AttrJob, run.Job),
		attribute.String(AttrAttempt, att.ID), attribute.Int(AttrAttemptNo, att.Number),
		attribute.String(AttrToken, att.Token.String()), attribute.String(AttrWorker, att.Worker))
}

// Granted records, on the leader, that att of run was granted: for a
// first attempt the run's root span "fired" (from the moment the leader
// fired it, att.GrantedAt, to now), then "granted" (the Raft entry: its
// epoch, seq and log index, and whether it was granted ahead of its
// time). It returns the "dispatched" span, started now, whose context
// the dispatch carries to the worker; End it when the worker took the
// attempt.
//
// A run the sampler leaves out costs one unrecorded span and no
// attributes: its dispatch carries the decision (an unsampled
// traceparent), so the worker records nothing of it either.
func (t *Tracer) Granted(run jobs.Run, att jobs.Attempt, now time.Time) *Span {
	if t == nil {
		return nil
	}
	ctx := context.Background()
	if att.Number <= 1 {
		var fired trace.Span
		ctx, fired = t.t.Start(context.WithValue(ctx, runKey{}, run.ID), SpanFired, trace.WithNewRoot(), trace.WithTimestamp(att.GrantedAt))
		if !fired.IsRecording() {
			return &Span{s: fired, ctx: ctx}
		}
		fired.SetAttributes(attribute.String(AttrRunID, run.ID), attribute.String(AttrJob, run.Job),
			attribute.String(AttrScheduledAt, run.ScheduledAt.UTC().Format(time.RFC3339Nano)), attribute.String("fencecron.trigger", run.Trigger))
		fired.End(trace.WithTimestamp(now))
	} else {
		ctx = runContext(ctx, run.ID)
	}
	ctx, granted := t.t.Start(ctx, SpanGranted, trace.WithTimestamp(att.GrantedAt))
	if !granted.IsRecording() {
		return &Span{s: granted, ctx: ctx}
	}
	granted.SetAttributes(append(attemptAttrs(run, att, 4),
		attribute.Int64(AttrEpoch, int64(att.Token.Epoch)), attribute.Int64(AttrSeq, int64(att.Token.Seq)),
		attribute.Int64(AttrLogIndex, int64(att.Token.Seq)), attribute.Bool(AttrAhead, att.GrantedAt.Before(run.ScheduledAt)))...)
	granted.End(trace.WithTimestamp(now))
	ctx, d := t.t.Start(ctx, SpanDispatched, trace.WithSpanKind(trace.SpanKindProducer))
	d.SetAttributes(attribute.String(AttrAttempt, att.ID), attribute.String(AttrWorker, att.Worker))
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
	sctx, s := t.t.Start(pctx, SpanAttempt, trace.WithSpanKind(trace.SpanKindConsumer))
	if s.IsRecording() {
		s.SetAttributes(attemptAttrs(run, att, 0)...)
	}
	return &Span{s: s, ctx: sctx}
}

type spanIDKey struct{}

// plannedSpanID is the span id Plan chose for the span being started in
// ctx, for an ID generator that gives it (see IDGenerator).
func plannedSpanID(ctx context.Context) (trace.SpanID, bool) {
	sid, ok := ctx.Value(spanIDKey{}).(trace.SpanID)
	return sid, ok
}

// Planned is a span whose ids are chosen before it starts (Plan); nil
// when tracing is off (its methods then do nothing).
type Planned struct {
	t      *Tracer
	parent context.Context
	ctx    context.Context // parent, naming the planned span id
	tp     string
}

// Plan chooses the ids of a span to start later, under parent's span,
// so that its traceparent can be handed out first: a job's request or
// process is prepared while it waits for its fire time, and between
// that time and its start nothing of its span is made (Start it after,
// with the time it started). The span gets the planned ids from a
// provider using IDGenerator (as every node's does); nil for a nil
// Tracer.
func (t *Tracer) Plan(parent context.Context) *Planned {
	if t == nil {
		return nil
	}
	p := &Planned{t: t, parent: parent, ctx: parent}
	if psc := trace.SpanContextFromContext(parent); psc.IsValid() {
		// The child's sampling follows its local parent's: its flags.
		sid := newSpanID()
		p.ctx = context.WithValue(parent, spanIDKey{}, sid)
		p.tp = TraceParent(trace.ContextWithSpanContext(parent, psc.WithSpanID(sid)))
	}
	return p
}

// TraceParent is the planned span's W3C traceparent; "" for a nil
// Planned or one without a parent.
func (p *Planned) TraceParent() string {
	if p == nil {
		return ""
	}
	return p.tp
}

// Start starts the planned span, named name, as begun at at; nil for a
// nil Planned.
func (p *Planned) Start(name string, kind trace.SpanKind, at time.Time, kv ...attribute.KeyValue) *Span {
	if p == nil {
		return nil
	}
	_, s := p.t.t.Start(p.ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(at))
	if len(kv) > 0 && s.IsRecording() {
		s.SetAttributes(kv...)
	}
	return &Span{s: s, ctx: trace.ContextWithSpan(p.parent, s)}
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

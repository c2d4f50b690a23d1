package main

import (
	"context"
	"errors"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/telemetry"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// publishTrace continues the run's trace that a job's TRACEPARENT names
// with a span of the publish, exported as the OTEL_* environment says
// (the worker hands its jobs the node's endpoint): the store's span of
// the write, and its refusal if any, then sit under the job's. Without
// TRACEPARENT or an endpoint it does nothing. end records the store's
// answer and flushes the span before the command exits.
func publishTrace(ctx context.Context, key string) (_ context.Context, end func(fencedstore.Result, error)) {
	noop := func(fencedstore.Result, error) {}
	parent := os.Getenv("TRACEPARENT")
	if parent == "" {
		return ctx, noop
	}
	tp, err := telemetry.Open(ctx, config.Telemetry{SampleRatio: config.DefaultSampleRatio}, os.Getenv("FENCECRON_NODE"))
	if err != nil || tp == nil {
		return ctx, noop // tracing is never a reason for a publish to fail
	}
	ctx, span := tp.Tracer(runtrace.Name).Start(runtrace.WithTraceParent(ctx, parent), "fencecron publish",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String(runtrace.AttrKey, key), attribute.String(runtrace.AttrRunID, os.Getenv("FENCECRON_RUN_ID")),
			attribute.String(runtrace.AttrAttempt, os.Getenv("FENCECRON_ATTEMPT")),
			attribute.String(runtrace.AttrToken, os.Getenv("FENCECRON_EPOCH")+"."+os.Getenv("FENCECRON_SEQ"))))
	return ctx, func(res fencedstore.Result, err error) {
		if res.Outcome != "" {
			span.SetAttributes(attribute.String(runtrace.AttrOutcome, string(res.Outcome)), attribute.String(runtrace.AttrGreatest, res.Greatest.String()))
		}
		switch {
		case errors.Is(err, fencedstore.ErrStaleOwner) || errors.Is(err, fencedstore.ErrExpired):
			span.AddEvent(runtrace.EventRefused, trace.WithAttributes(attribute.String(runtrace.AttrOutcome, string(res.Outcome)),
				attribute.String(runtrace.AttrToken, os.Getenv("FENCECRON_EPOCH")+"."+os.Getenv("FENCECRON_SEQ")), attribute.String(runtrace.AttrGreatest, res.Greatest.String())))
			span.SetStatus(codes.Error, "the store refused the write: "+string(res.Outcome))
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		tp.Shutdown(sctx)
	}
}

package runtrace_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// BenchmarkRun_Spans is the spans of one HTTP job's run, as the leader
// and a worker make them (fired, granted, dispatched; attempt, http
// request, completed), batched by the SDK's batch span processor to an
// exporter that drops them, or to the OTLP/HTTP exporter sending them to
// a loopback receiver that reads and drops each export: what tracing
// costs a run in CPU and allocations, from making its spans to sending.
func BenchmarkRun_Spans(b *testing.B) {
	b.Run("noop", func(b *testing.B) {
		benchRunSpans(b, tracetest.NewNoopExporter())
	})
	b.Run("otlphttp", func(b *testing.B) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		defer srv.Close()
		exp, err := otlptracehttp.New(b.Context(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
		if err != nil {
			b.Fatal(err)
		}
		benchRunSpans(b, exp)
	})
}

func benchRunSpans(b *testing.B, exp sdktrace.SpanExporter) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithIDGenerator(runtrace.IDGenerator{}), sdktrace.WithSampler(runtrace.Sampler(1)))
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
		req := worker.Start(span.Context(context.Background()), runtrace.SpanHTTP, trace.SpanKindClient)
		_ = req.TraceParent()
		req.End(nil)
		done := worker.Start(span.Context(context.Background()), runtrace.SpanCompleted, trace.SpanKindClient)
		done.End(nil)
		span.End(nil)
	}
	b.StopTimer()
	if err := tp.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
}

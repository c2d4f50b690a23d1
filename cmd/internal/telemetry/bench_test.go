package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencecron/fencecron/scheduler/runtrace"
	"github.com/fencecron/fencecron/scheduler/runtrace/runtracetest"
)

// BenchmarkBatch_RunSpans is what tracing costs one HTTP job's run, from
// making its spans to sending them: the leader's (fired, granted,
// dispatched) and the worker's (attempt, http request, completed),
// batched and sent over OTLP/HTTP to a loopback receiver that reads and
// drops each export, in the SDK's default batches and in ours
// (batchOptions). Every span is sent (the processor blocks instead of
// dropping, so the loop cannot outrun the exports). cpu-ns/op is the
// process's CPU time per run, the receiver's reading included: on a busy
// machine it varies less than ns/op.
func BenchmarkBatch_RunSpans(b *testing.B) {
	b.Run("sdk-defaults", func(b *testing.B) { benchRunSpans(b) })
	b.Run("fencecron", func(b *testing.B) { benchRunSpans(b, batchOptions()...) })
}

func benchRunSpans(b *testing.B, opts ...sdktrace.BatchSpanProcessorOption) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	exp, err := otlptracehttp.New(b.Context(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, append(opts, sdktrace.WithBlocking())...),
		sdktrace.WithIDGenerator(runtrace.IDGenerator{}), sdktrace.WithSampler(runtrace.Sampler(1)))
	leader, worker := runtrace.New(tp), runtrace.New(tp)
	t0 := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	cpu0 := cpuTime()
	i := 0
	for b.Loop() {
		i++
		runtracetest.HTTPRun(leader, worker, t0, i)
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

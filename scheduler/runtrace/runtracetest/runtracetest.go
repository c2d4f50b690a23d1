// Package runtracetest makes the spans of runs for benchmarks of tracing:
// the same run, made the same way, wherever what it costs is measured.
package runtracetest

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// HTTPRun makes the spans of the i-th run of an HTTP job scheduled at
// t0 plus i seconds, as the leader and a worker make them: fired,
// granted and dispatched on leader; the attempt, its planned request and
// the completion on worker.
func HTTPRun(leader, worker *runtrace.Tracer, t0 time.Time, i int) {
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

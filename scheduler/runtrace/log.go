package runtrace

import (
	"context"
	"log/slog"

	"github.com/fencecron/fencecron/jobs"
)

// LogTraceID and LogSpanID are the log keys of the trace a line belongs
// to, while tracing is on.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler wraps a node's log handler while tracing is on: a line that
// names a run (run_id) and no trace gets the run's trace_id and, as its
// span_id, the run's root span ("fired"), both of which every node
// derives from the run id alone (TraceID, RootSpanID), so a log pipeline
// can jump from any line about a run to its trace. Lines made under a
// span of their own (a worker's attempt) carry that span's ids instead,
// added where the span is known.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h: h} }

type logHandler struct {
	h     slog.Handler
	named bool // the handler's own attributes hold a trace_id (or one was added)
}

func (l logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	named := l.named
	run := ""
	for _, a := range as {
		switch a.Key {
		case LogTraceID:
			named = true
		case jobs.LogRunID:
			run = a.Value.String()
		}
	}
	if !named && run != "" {
		tid, sid := runIDs(run)
		as = append(as[:len(as):len(as)], slog.String(LogTraceID, tid.String()), slog.String(LogSpanID, sid.String()))
		named = true
	}
	return logHandler{h: l.h.WithAttrs(as), named: named}
}

func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h: l.h.WithGroup(name), named: l.named}
}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if !l.named {
		run, named := "", false
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case LogTraceID:
				named = true
			case jobs.LogRunID:
				run = a.Value.String()
			}
			return true
		})
		if run != "" && !named {
			r = r.Clone()
			tid, sid := runIDs(run)
			r.AddAttrs(slog.String(LogTraceID, tid.String()), slog.String(LogSpanID, sid.String()))
		}
	}
	return l.h.Handle(ctx, r)
}

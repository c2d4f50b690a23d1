package scheduler

import (
	"context"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Forwarder is what a node asks of the leader. Scheduler implements it
// (answering as leader, or forwarding through its Forwarder field);
// Scheduler.Local() answers only as the leader (jobs.ErrNotLeader
// otherwise) and is what the transport's server calls; the transport's
// client implements it over the network.
//
// Every call is typed: no encoded log command crosses the wire, and the
// leader re-validates what it is sent. Every call is idempotent (by
// attempt id, job name or content), so a retry after a lost reply is
// safe. Implementations are safe for concurrent use. Errors are the
// domain's sentinels (jobs.ErrUnknownJob, jobs.ErrNotFound,
// jobs.ErrStaleAttempt, jobs.ErrInvalidConfig, jobs.ErrNotLeader...),
// wrapped; an error that is none of them (a transport failure, ctx
// ending) leaves unknown whether the leader acted.
type Forwarder interface {
	SetJobs(ctx context.Context, specs []jobs.Spec, source string) (hash string, err error)
	Trigger(ctx context.Context, job string, force bool) (jobs.Run, error)
	Pause(ctx context.Context, job string, paused bool) error
	Started(ctx context.Context, attempt string, at time.Time) error
	Complete(ctx context.Context, c Completion) error
	Note(ctx context.Context, attempt, kind, node, detail string) error
	Audit(ctx context.Context, kind, node, detail string) error
	Renew(ctx context.Context, attempt, node string) (RenewReply, error)
}

package agent

import (
	"context"
	"fmt"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// refusalsTo is the store handler's OnRefused: it queues a note for the
// leader, so that a job's own publish the store refused lands in the
// cluster's ledger against the attempt its signed token names. It never
// blocks the request; a full queue drops the note (logged and counted).
func refusalsTo(q *worker.NoteQueue) func(context.Context, fencedstore.SignedToken, fencedstore.Result) {
	return func(_ context.Context, st fencedstore.SignedToken, res fencedstore.Result) {
		q.Add(st.Attempt, jobs.NoteStoreRefused, fmt.Sprintf("%s %s greatest=%s", res.Outcome, res.Key, res.Greatest))
	}
}

package scheduler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// The few log entries tests of the leader, worker and notifier put in an
// FSM by hand, written against package fsm's exported commands (its own
// tests have fuller helpers of their own).

var t0 = time.Date(2026, 7, 1, 9, 0, 5, 0, time.UTC)

func grant(job string, at time.Time) replicated.Command {
	return replicated.Command{Op: replicated.OpGrant, Grant: &replicated.GrantCmd{Job: job, ScheduledAt: at, Worker: "w1", Trigger: "schedule", At: at}}
}

func complete(attempt string, st jobs.State, exit int, workers map[string]string) replicated.Command {
	return replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: attempt, State: st, ExitCode: &exit, EndedAt: t0.Add(time.Second)},
		Follow: &replicated.FollowCmd{Workers: workers, At: t0.Add(time.Second)}}
}

// applyAt applies c as log entry (term, index); a grant in a term whose
// election entry is not applied yet gets one first, as a leader loop's
// would be (the FSM refuses tokens of a term it has not seen start).
func applyAt(t *testing.T, f *fsm.FSM, term, index uint64, c replicated.Command) fsm.ApplyResult {
	t.Helper()
	if e, _ := f.Epoch(); c.Op == replicated.OpGrant && e != term {
		applyRaw(t, f, term, index, rawEntry(t, replicated.LogVersion, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "test-leader", At: t0}}))
	}
	return applyRaw(t, f, term, index, rawEntry(t, replicated.LogVersion, c))
}

func applyRaw(t *testing.T, f *fsm.FSM, term, index uint64, b []byte) fsm.ApplyResult {
	t.Helper()
	res, ok := f.Apply(rawLog(term, index, b)).(fsm.ApplyResult)
	if !ok {
		t.Fatalf("Apply returned %T", res)
	}
	return res
}

func rawLog(term, index uint64, data []byte) *raft.Log {
	return &raft.Log{Term: term, Index: index, Type: raft.LogCommand, Data: data}
}

func rawEntry(t *testing.T, v int, c replicated.Command) []byte {
	t.Helper()
	c.V = v
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func groupSpecs(maxRunning, maxWaiting int, names ...string) []jobs.Spec {
	g := &jobs.Group{Name: "db", MaxRunning: maxRunning, MaxWaiting: maxWaiting}
	var out []jobs.Spec
	for _, n := range names {
		out = append(out, jobs.Spec{Name: n, Schedules: []string{"@every 5s"}, Shell: "true", Group: "db", GroupLimits: g})
	}
	return out
}

// renewOne renews one attempt of node as a worker's batch of one does
// (renewAll): a start the log must confirm is answered once it is.
func renewOne(l *leader, r worker.Renewal, node string) (worker.RenewReply, error) {
	out, err := l.renewAll(context.Background(), node, []worker.Renewal{r})
	if err != nil {
		return worker.RenewReply{}, err
	}
	return out[0], nil
}

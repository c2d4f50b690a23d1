package notify

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// The few log entries the sender's tests need, written against package
// fsm's exported commands, and a one-node log that applies them.

var t0 = time.Date(2026, 7, 1, 9, 0, 5, 0, time.UTC)

func grant(job string, at time.Time) replicated.Command {
	return replicated.Command{Op: replicated.OpGrant, Grant: &replicated.GrantCmd{Job: job, ScheduledAt: at, Worker: "w1", Trigger: "schedule", At: at}}
}

func complete(attempt string, st jobs.State, exit int) replicated.Command {
	return replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: attempt, State: st, ExitCode: &exit, EndedAt: t0.Add(time.Second)},
		Follow: &replicated.FollowCmd{At: t0.Add(time.Second)}}
}

// testLog is a one-node cluster whose log never fails: every entry is
// applied to the FSM at once, in one term, as a leader's would be.
type testLog struct {
	fsm   *fsm.FSM
	mu    sync.Mutex
	index uint64
}

// newTestLog returns a log whose term has begun (its election entry
// applied) with the given job set.
func newTestLog(t testing.TB, specs ...jobs.Spec) *testLog {
	t.Helper()
	lg := &testLog{fsm: fsm.NewFSM()}
	lg.mustApply(t, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})
	specs, err := replicated.CheckJobSet(specs, jobs.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lg.mustApply(t, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "test", At: t0, Hash: jobs.HashSpecs(specs)}})
	return lg
}

// apply appends c to the log and applies it, as the leader's proposal
// would be: its error is the entry's, if the FSM refused it.
func (lg *testLog) apply(c replicated.Command) (fsm.ApplyResult, error) {
	b, err := fsm.EncodeEntry(c)
	if err != nil {
		return fsm.ApplyResult{}, err
	}
	lg.mu.Lock()
	defer lg.mu.Unlock()
	lg.index++
	resp := lg.fsm.Apply(&raft.Log{Term: 3, Index: lg.index, Type: raft.LogCommand, Data: b})
	res, ok := resp.(fsm.ApplyResult)
	if !ok {
		return fsm.ApplyResult{}, fmt.Errorf("Apply returned %T", resp)
	}
	return res, res.Err
}

func (lg *testLog) mustApply(t testing.TB, c replicated.Command) fsm.ApplyResult {
	t.Helper()
	res, err := lg.apply(c)
	if err != nil {
		t.Fatalf("%s: %v", c.Op, err)
	}
	return res
}

// propose is the sender's Proposer over this log.
func (lg *testLog) propose(_ context.Context, c replicated.Command) error {
	_, err := lg.apply(c)
	return err
}

// runSender runs a sender of lg's notices with cfg, on the system clock,
// until the test ends.
func runSender(t *testing.T, lg *testLog, cfg Config) *Sender {
	t.Helper()
	n := New(cfg, lg.fsm, lg.propose, jobs.SystemClock{}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

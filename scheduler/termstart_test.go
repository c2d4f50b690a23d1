package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A leader loop whose grant is refused for a term it did not start ends
// (the scheduler starts a fresh one), and the caller is told to retry.
func TestLeader_TermNotStartedEndsTheLoop(t *testing.T) {
	l, sm := newTestLeader(t, spec("j", jobs.MisfireSkip, jobs.OverlapAllow))
	// Another term's election entry: this loop's term is no longer the
	// one the log last started.
	if res := applyRaw(t, sm, 9, 1000, rawEntry(t, replicated.LogVersion, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n2", At: base}})); res.Err != nil {
		t.Fatal(res.Err)
	}
	_, err := l.trigger(context.Background(), "j", false, l.s.now(), l.s.now())
	if !errors.Is(err, fsm.ErrTermNotStarted) || !errors.Is(err, jobs.ErrNotLeader) || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("trigger in a term not started: %v, want ErrTermNotStarted and ErrNotLeader, saying retry", err)
	}
	select {
	case <-l.ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the loop's context was not ended after the refusal")
	}
	if runs := sm.Runs(fsm.RunFilter{Job: "j"}); len(runs) != 0 {
		t.Errorf("refused trigger left runs: %v", runs)
	}
}

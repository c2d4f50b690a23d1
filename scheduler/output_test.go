package scheduler

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// The leader takes the longest stdout tail a worker keeps
// (StdoutTailBytes) and refuses a longer one.
func TestLocal_CompletionStdoutTailBound(t *testing.T) {
	c := replicated.Completion{Attempt: "loud@x.1", State: jobs.Failed, ExitCode: new(3), EndedAt: t0, StdoutTail: strings.Repeat("x", worker.StdoutTailBytes)}
	if err := checkCompletion(c); err != nil {
		t.Errorf("the leader refuses a full tail: %v", err)
	}
	c.StdoutTail += "x"
	if err := checkCompletion(c); !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Errorf("a tail beyond the bound: %v, want refused", err)
	}
}

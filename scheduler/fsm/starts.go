package fsm

import (
	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A worker reports a start when its process has run for startReportDelay
// (scheduler/worker/worker.go), so that the run shows as running; a shorter run's start
// rides on its completion. Each report used to be a Raft entry of its
// own. On a loaded host every run can outlast the delay (its process
// waits for a CPU), and a start entry for every run then took more of
// the CPU the processes were waiting for: at 800 fires a second on two
// cores, 1.26 entries a run and a cluster that fell further behind each
// second. The leader now commits start reports in groups, as it does
// completions (OpStarts, log version 6; groupcommit.go). Each start in a
// group is applied exactly as a single one (applyStart) and answered on
// its own; a repeated start changes nothing.

// applyStarts applies each start of a group in order.
func (f *FSM) applyStarts(l *raft.Log, c *replicated.StartsCmd) ApplyResult {
	res := ApplyResult{Batch: make([]ApplyResult, len(c.Starts))}
	for i := range c.Starts {
		res.Batch[i] = f.applyStart(l, &c.Starts[i])
	}
	return res
}

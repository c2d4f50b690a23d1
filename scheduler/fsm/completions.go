package fsm

import (
	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Completions reach the leader one by one, from every worker, and each
// used to be a Raft entry of its own: at 100 runs a second, a hundred
// commits a second on every server. The leader now commits them in
// groups (OpCompletes, log version 3): a completion that arrives while
// others are being committed waits for the next group instead of for a
// commit slot of its own. Each completion in a group is applied exactly
// as a single one (applyComplete) and answered on its own; they are
// idempotent, so a worker that retries one after a lost answer changes
// nothing.
//
// A group also waits groupLinger after its first completion for
// others. Runs that fire together used to end together, and committing
// whatever was waiting made large groups; but when their processes run
// at a lower priority than the node (node.job_nice) they end spread over
// the next second, and groups of one or two made a Raft entry for almost
// every run (0.65 entries a run at 500 runs a second, and 2.1 ms of CPU
// a run across the cluster instead of 0.9). Waiting 10 ms brought that
// to 0.13 entries and 1.4 ms, 50 ms to 0.04 entries and 1.2 ms
// (fencebench lateness). A run's end is recorded up to 50 ms later;
// nothing a user sees waits on it but the next run of a job that forbids
// overlap.

// applyCompletes applies each completion of a group in order. Each
// one's result holds only its error: the leader reads nothing else, and
// copying each run for it (about 500 bytes, on every server) was waste.
func (f *FSM) applyCompletes(l *raft.Log, version int, c *replicated.CompletesCmd) ApplyResult {
	res := ApplyResult{Batch: make([]ApplyResult, len(c.Completions))}
	for i := range c.Completions {
		_, res.Batch[i].Err = f.complete(l, version, &c.Completions[i])
	}
	return res
}

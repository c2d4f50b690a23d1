package fsm

import (
	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm/batchgrant"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A batch grant (OpGrants, log version 3) is one Raft entry that grants
// the first attempt of several runs due at the same instant: at 100 fires
// a second one entry, one commit round and one fsync on every server
// instead of a hundred. Each run in it is decided on its own by
// DecideGrant, exactly as a single grant would be, in the order the
// entry lists them.
//
// Every attempt a batch grants gets the same fence token: the entry's
// term and index. A token is what the store compares per key, so two
// attempts may share one only if no key can be written by both: the
// batch refuses (ErrBatchOverlap) each grant whose keys could meet those
// of an earlier grant in the same entry, and the leader grants that run
// again in an entry of its own. So, per key, a token still belongs to
// one attempt at most, as when every grant had its own entry.

// ErrBatchOverlap refuses a grant in a batch whose job's keys could meet
// those of an earlier grant in the same entry (batchgrant.Decide).
var ErrBatchOverlap = batchgrant.ErrOverlap

// MaxBatchGrants bounds the grants the leader puts in one entry.
const MaxBatchGrants = batchgrant.MaxGrants

// applyGrants applies a batch: each grant batchgrant.Decide keeps is
// applied as a grant of its own would be (applyGrant), in the entry's
// order. The result holds one ApplyResult per grant, in the same order.
func (f *FSM) applyGrants(l *raft.Log, version int, c *replicated.GrantsCmd) ApplyResult {
	members := make([]batchgrant.Member, len(c.Grants))
	for i, g := range c.Grants {
		m := batchgrant.Member{Job: g.Job, Output: g.Output}
		if spec, ok := f.spec(g.Job); ok {
			m.Scope = spec.OutputPrefix()
		}
		members[i] = m
	}
	verdicts := batchgrant.Decide(members)
	res := ApplyResult{Batch: make([]ApplyResult, len(c.Grants))}
	for i := range c.Grants {
		if verdicts[i] != nil {
			res.Batch[i] = ApplyResult{Err: verdicts[i]}
			continue
		}
		res.Batch[i] = f.applyGrant(l, version, replicated.OpGrant, &c.Grants[i])
	}
	return res
}

// batchRuns returns the runs of a batch's grants, for the log.
func batchRuns(gs []replicated.GrantCmd) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = jobs.RunID(g.Job, g.ScheduledAt)
	}
	return out
}

// Skips under overload. A leader that falls behind (a busy machine, a
// failover) finds several fire times of many jobs due at once, and their
// misfire policy records the missed ones as a range per job: one entry
// each was a burst of entries exactly when the leader could least afford
// it. OpSkipRanges (log version 4) records the ranges found together in
// one entry, each applied as OpSkipRange applies one.

// MaxSkipBatch bounds the ranges in one entry.
const MaxSkipBatch = 1024

func (f *FSM) applySkipRanges(l *raft.Log, c *replicated.SkipRangesCmd) ApplyResult {
	for _, r := range c.Ranges {
		f.applySkipRange(l, &replicated.SkipRangeCmd{SkipRange: r, At: c.At})
	}
	return ApplyResult{}
}

package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
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
// those of an earlier grant in the same entry; it changes nothing, and
// the run may be granted in an entry of its own.
var ErrBatchOverlap = errors.New("keys overlap another grant in the same entry")

// MaxBatchGrants bounds the grants the leader puts in one entry (a
// refused grant is compared with each kept one, to name the first).
const MaxBatchGrants = 256

// BatchMember is what decides whether a grant may share a batch entry:
// its job and the keys its token can write, which are the job's token
// scope (jobs.Spec.OutputPrefix) and its output key (which may lie
// outside the scope; empty for a job without output).
type BatchMember struct {
	Job    string
	Scope  string
	Output string
}

// DecideBatch returns, for each member of a batch in order, nil if it may
// share the entry's fence token with the members before it that were
// kept, or ErrBatchOverlap if one of them is the same job or could write
// a key it can write: one's scope or output is a prefix of the other's
// (a key is treated as a prefix too, which errs on the side of
// refusing). It is pure, so every replica decides the same.
//
// The kept members' jobs and keys are indexed (batchKeys), so a batch
// costs about n log n rather than a comparison of every pair: at 1,000
// fires a second those comparisons were a seventh of applying the log on
// each server (a fifth in BenchmarkFSM_Steady).
// A member refused is compared with each kept one in order only to name
// the first it meets, as the error always has.
func DecideBatch(members []BatchMember) []error {
	out := make([]error, len(members))
	kept := make([]BatchMember, 0, len(members))
	idx := newBatchKeys(len(members))
	for i, m := range members {
		if !idx.meets(m) {
			kept = append(kept, m)
			idx.add(m)
			continue
		}
		for _, k := range kept {
			if m.Job == k.Job || keysMeet(m, k) {
				out[i] = fmt.Errorf("grant of %s: %w (%s)", m.Job, ErrBatchOverlap, k.Job)
				break
			}
		}
	}
	return out
}

// keysMeet reports whether a key could be written by both a and b.
func keysMeet(a, b BatchMember) bool {
	for _, x := range []string{a.Scope, a.Output} {
		for _, y := range []string{b.Scope, b.Output} {
			if x == "" || y == "" {
				continue
			}
			if strings.HasPrefix(x, y) || strings.HasPrefix(y, x) {
				return true
			}
		}
	}
	return false
}

// batchKeys indexes the jobs and the non-empty keys (scopes and outputs)
// of a batch's kept members, to answer whether a member meets any of
// them as keysMeet would.
type batchKeys struct {
	jobs   map[string]struct{}
	keys   map[string]struct{}
	sorted []string    // keys, in byte order
	lens   map[int]int // how many keys have each length
}

func newBatchKeys(n int) *batchKeys {
	return &batchKeys{jobs: make(map[string]struct{}, n), keys: make(map[string]struct{}, 2*n), sorted: make([]string, 0, 2*n), lens: map[int]int{}}
}

func (b *batchKeys) add(m BatchMember) {
	b.jobs[m.Job] = struct{}{}
	for _, k := range [2]string{m.Scope, m.Output} {
		if _, ok := b.keys[k]; k == "" || ok {
			continue
		}
		b.keys[k] = struct{}{}
		i, _ := slices.BinarySearch(b.sorted, k)
		b.sorted = slices.Insert(b.sorted, i, k)
		b.lens[len(k)]++
	}
}

// meets reports whether m is the job of a kept member or has a key that
// one of theirs is a prefix of, or that is a prefix of one of theirs.
func (b *batchKeys) meets(m BatchMember) bool {
	if _, ok := b.jobs[m.Job]; ok {
		return true
	}
	for _, x := range [2]string{m.Scope, m.Output} {
		if x == "" {
			continue
		}
		// Keys that x is a prefix of sort together, from x on.
		if i, _ := slices.BinarySearch(b.sorted, x); i < len(b.sorted) && strings.HasPrefix(b.sorted[i], x) {
			return true
		}
		// A key that is a prefix of x is x cut to that key's length.
		for n := range b.lens {
			if n <= len(x) {
				if _, ok := b.keys[x[:n]]; ok {
					return true
				}
			}
		}
	}
	return false
}

// applyGrants applies a batch: each grant DecideBatch keeps is applied as
// a grant of its own would be (applyGrant), in the entry's order. The
// result holds one ApplyResult per grant, in the same order.
func (f *FSM) applyGrants(l *raft.Log, version int, c *replicated.GrantsCmd) ApplyResult {
	members := make([]BatchMember, len(c.Grants))
	for i, g := range c.Grants {
		m := BatchMember{Job: g.Job, Output: g.Output}
		if spec, ok := f.spec(g.Job); ok {
			m.Scope = spec.OutputPrefix()
		}
		members[i] = m
	}
	verdicts := DecideBatch(members)
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

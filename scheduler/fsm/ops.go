package fsm

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// The ops of the replicated log. Each is declared once, in opTable: its
// name, the log version it appeared in, whether an entry carries its
// payload, whether it may mint a token, the time its proposer gave it, and
// the function that applies it. decodeEntry refuses an entry whose op is
// not in the table for its version or that lacks the payload; FSM.apply
// dispatches through the table. An entry's payload travels in the field of
// Command named after the op (the log's JSON format).

// opSpec is one row of opTable.
type opSpec struct {
	name string
	// since is the first log version that has the op.
	since int
	// has says whether c carries the op's payload.
	has func(c *replicated.Command) bool
	// mints says whether the entry may mint a token (nil: never, but
	// for the runs that follow; see mintsToken).
	mints func(c *replicated.Command) bool
	// at is when the proposer says the entry happened (nil: no time).
	at func(c *replicated.Command) time.Time
	// apply applies the entry; c.V says by which version's rules.
	apply func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult
}

func always(*replicated.Command) bool { return true }

// opTable is every op this binary applies.
var opTable = []opSpec{
	{name: replicated.OpElected, since: 1,
		has:   func(c *replicated.Command) bool { return c.Elected != nil },
		at:    func(c *replicated.Command) time.Time { return c.Elected.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyElected(l, c.Elected) }},
	{name: replicated.OpSetJobs, since: 1,
		has: func(c *replicated.Command) bool { return c.SetJobs != nil },
		at:  func(c *replicated.Command) time.Time { return c.SetJobs.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult {
			if err := namespacesAllowed(c.V, c.SetJobs.Jobs); err != nil {
				return ApplyResult{Err: err}
			}
			return f.applySetJobs(l, c.SetJobs)
		}},
	{name: replicated.OpGrant, since: 1, mints: always,
		has: func(c *replicated.Command) bool { return c.Grant != nil },
		at:  func(c *replicated.Command) time.Time { return c.Grant.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult {
			return f.applyGrant(l, c.V, c.Op, c.Grant)
		}},
	// A skip is a grant the leader records as skipped (no worker, a key
	// that does not render): the same payload, decided by DecideGrant.
	{name: replicated.OpSkip, since: 1,
		has: func(c *replicated.Command) bool { return c.Grant != nil },
		at:  func(c *replicated.Command) time.Time { return c.Grant.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult {
			return f.applyGrant(l, c.V, c.Op, c.Grant)
		}},
	{name: replicated.OpSkipRange, since: 1,
		has:   func(c *replicated.Command) bool { return c.SkipRange != nil },
		at:    func(c *replicated.Command) time.Time { return c.SkipRange.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applySkipRange(l, c.SkipRange) }},
	{name: replicated.OpStart, since: 1,
		has:   func(c *replicated.Command) bool { return c.Start != nil },
		at:    func(c *replicated.Command) time.Time { return c.Start.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyStart(l, c.Start) }},
	{name: replicated.OpComplete, since: 1,
		has: func(c *replicated.Command) bool { return c.Complete != nil },
		at:  func(c *replicated.Command) time.Time { return c.Complete.EndedAt },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult {
			return f.applyComplete(l, c.V, c.Complete)
		}},
	// An expiry that names a worker grants the run's next attempt in the
	// same entry.
	{name: replicated.OpExpire, since: 1,
		has:   func(c *replicated.Command) bool { return c.Expire != nil },
		mints: func(c *replicated.Command) bool { return c.Expire.Worker != "" },
		at:    func(c *replicated.Command) time.Time { return c.Expire.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyExpire(l, c.V, c.Expire) }},
	{name: replicated.OpRetry, since: 1, mints: always,
		has:   func(c *replicated.Command) bool { return c.Retry != nil },
		at:    func(c *replicated.Command) time.Time { return c.Retry.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyRetry(l, c.Retry) }},
	{name: replicated.OpPause, since: 1,
		has:   func(c *replicated.Command) bool { return c.Pause != nil },
		at:    func(c *replicated.Command) time.Time { return c.Pause.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyPause(l, c.Pause) }},
	{name: replicated.OpNote, since: 1,
		has:   func(c *replicated.Command) bool { return c.Note != nil },
		at:    func(c *replicated.Command) time.Time { return c.Note.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyNote(l, c.V, c.Note) }},
	{name: replicated.OpAudit, since: 1,
		has:   func(c *replicated.Command) bool { return c.Audit != nil },
		at:    func(c *replicated.Command) time.Time { return c.Audit.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyAudit(l, c.V, c.Audit) }},
	{name: replicated.OpGrants, since: replicated.VersionBatches, mints: always,
		has:   func(c *replicated.Command) bool { return c.Grants != nil && len(c.Grants.Grants) > 0 },
		at:    func(c *replicated.Command) time.Time { return c.Grants.Grants[0].At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyGrants(l, c.V, c.Grants) }},
	{name: replicated.OpCompletes, since: replicated.VersionBatches,
		has: func(c *replicated.Command) bool { return c.Completes != nil && len(c.Completes.Completions) > 0 },
		at: func(c *replicated.Command) time.Time {
			return c.Completes.Completions[len(c.Completes.Completions)-1].EndedAt
		},
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult {
			return f.applyCompletes(l, c.V, c.Completes)
		}},
	{name: replicated.OpSkipRanges, since: replicated.VersionSkipRanges,
		has: func(c *replicated.Command) bool { return c.SkipRanges != nil && len(c.SkipRanges.Ranges) > 0 },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult {
			return f.applySkipRanges(l, c.SkipRanges)
		}},
	{name: replicated.OpNotified, since: replicated.VersionFollow,
		has:   func(c *replicated.Command) bool { return c.Notified != nil },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyNotified(l, c.Notified) }},
	{name: replicated.OpBackfill, since: replicated.VersionBackfill,
		has:   func(c *replicated.Command) bool { return c.Backfill != nil },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyBackfill(l, c.Backfill) }},
	// The released attempt's run is retried in the same entry when its
	// policy allows.
	{name: replicated.OpRelease, since: replicated.VersionRelease, mints: always,
		has:   func(c *replicated.Command) bool { return c.Release != nil },
		at:    func(c *replicated.Command) time.Time { return c.Release.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyRelease(l, c.Release) }},
	{name: replicated.OpAdmit, since: replicated.VersionGroups, mints: always,
		has:   func(c *replicated.Command) bool { return c.Admit != nil },
		at:    func(c *replicated.Command) time.Time { return c.Admit.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyAdmit(l, c.Admit) }},
	{name: replicated.OpSetJobsDiff, since: replicated.VersionJobsDiff,
		has: func(c *replicated.Command) bool { return c.SetJobsDiff != nil },
		at:  func(c *replicated.Command) time.Time { return c.SetJobsDiff.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult {
			if err := namespacesAllowed(c.V, c.SetJobsDiff.Upsert); err != nil {
				return ApplyResult{Err: err}
			}
			return f.applySetJobsDiff(l, c.SetJobsDiff)
		}},
	{name: replicated.OpStarts, since: replicated.VersionStartBatches,
		has:   func(c *replicated.Command) bool { return c.Starts != nil && len(c.Starts.Starts) > 0 },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyStarts(l, c.Starts) }},
	{name: replicated.OpACL, since: replicated.VersionACL,
		has:   func(c *replicated.Command) bool { return c.ACL != nil },
		at:    func(c *replicated.Command) time.Time { return c.ACL.At },
		apply: func(f *FSM, l *raft.Log, c *replicated.Command) ApplyResult { return f.applyACL(l, c.ACL) }},
	{name: replicated.OpConfirmStarts, since: replicated.VersionStartsInLog,
		has: func(c *replicated.Command) bool { return c.ConfirmStarts != nil && len(c.ConfirmStarts.Attempts) > 0 },
		at:  func(c *replicated.Command) time.Time { return c.ConfirmStarts.At },
		apply: func(f *FSM, _ *raft.Log, c *replicated.Command) ApplyResult {
			return f.applyConfirmStarts(c.ConfirmStarts)
		}},
}

// opsByName indexes opTable.
var opsByName = indexOps(opTable)

func indexOps(table []opSpec) map[string]opSpec {
	m := make(map[string]opSpec, len(table))
	for _, o := range table {
		if _, twice := m[o.name]; twice {
			panic("fsm: op " + o.name + " declared twice")
		}
		m[o.name] = o
	}
	return m
}

// mintsToken says whether entry c, of op o, may mint a token: the op's
// own grants, or the runs that follow the runs it finishes, granted to
// the workers its follow field names (after.go).
func (o opSpec) mintsToken(c *replicated.Command) bool {
	if o.mints != nil && o.mints(c) {
		return true
	}
	return c.Follow != nil && len(c.Follow.Workers) > 0
}

// commandTime is when the proposer says entry c happened: the time
// promotions it causes are recorded at (Apply never reads a clock).
func commandTime(c replicated.Command) time.Time {
	if o, ok := opsByName[c.Op]; ok && o.at != nil && o.has(&c) {
		return o.at(&c)
	}
	return time.Time{}
}

package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/hashicorp/raft"
)

// The replicated log is versioned so that servers of different releases
// never compute different states from the same entries (as nomad's FSM
// does with a message type per entry). Every entry carries the format
// version of the binary that wrote it in its "v" field; an entry without
// one was written before versions existed and is version 1. A server
// applies an entry with the rules of the entry's version, so a newer
// server reading an older leader's entries reaches the state the older
// servers reach. A server that meets an entry it cannot read (a newer
// version, an op it does not know, an entry it cannot decode) stops
// applying the log right there: it does not skip the entry and does not
// apply any later one, because a replica that skips what it does not
// understand diverges silently. It fails /readyz, logs the entry at error
// and counts the halt (LogHalts); it refuses to snapshot meanwhile, so
// Raft keeps every entry after the halt and the node catches up once it
// runs a binary that reads them.
//
// Versions:
//
//	1  entries before versions existed: the leader decided overlap
//	   before proposing a grant; notes counted any kind; audit entries
//	   took any kind the FSM does not make itself.
//	2  a grant decides uniqueness and overlap inside Apply (forbid
//	   records a skip, replace cancels the open attempts in the same
//	   entry, force overrides and is audited); notes and audit entries
//	   take only known kinds, and a store_refused note counts in
//	   stale_refused and fences the attempt it concerns; snapshots carry
//	   their version.
//	3  a batch grant (op "grants": one entry grants the first attempts
//	   of several runs due at once, sharing its token where their keys
//	   cannot meet, see batch.go); a group of completions in one entry
//	   (op "completes", see completions.go); a completion records when
//	   the worker received the dispatch (Attempt.AcceptedAt).
//	4  a grant may be marked ahead (grantCmd.Ahead: proposed before the
//	   run's fire time); Apply refuses it (ErrNotAhead, nothing changes)
//	   while the job has an open run and overlap forbid or replace, see
//	   pregrant.go; several ranges of skipped fire times in one entry
//	   (op "skip_ranges", see batch.go).
//	   A completion records the end of stdout when it was not
//	   published (Attempt.StdoutTail, output.go); an audit entry may
//	   be of kind clock_skew (skew.go). Notifications and
//	   dependencies: an entry that ends attempts or finishes runs
//	   records the notifications due (state notices) and decides the
//	   runs of the jobs that follow them (after:), granting them in that
//	   entry with the workers its follow field names; op "notified"
//	   records deliveries (see notify.go, after.go).
//	   A backfill (op "backfill"):
//	   Apply queues a job's fire times that have no run and are after
//	   its retained horizon (state.Backfills, in snapshots too); a
//	   grant with trigger "backfill" is admitted only for a queued time
//	   and, unless it records a skip, while the job has room for another
//	   backfill run (BackfillRoom, else ErrBackfillWait: nothing
//	   recorded); see backfill.go.
//	   A forced release (op "release", see release.go): an operator ends
//	   an open attempt's lease now, with a reason and who asked; the
//	   attempt ends lost and its run is retried by its policy.
//	   Concurrency groups (see groups.go): a grant of a group's job takes
//	   a place in its group, waits in the group's queue, or is skipped
//	   when the queue is full; every entry admits the oldest waiters
//	   while places are free; op "admit" grants an admitted run's first
//	   attempt.
//	   An entry that mints a token in an epoch whose election entry is
//	   not yet applied is refused whole (ErrTermNotStarted, termstart.go).
//	5  an expiry may carry the leader's word that the attempt never
//	   started (expireCmd.NeverStarted); Apply marks it so only for an
//	   attempt granted in the entry's epoch after its election entry,
//	   and such an attempt does not count against the job's retries
//	   (see startconfirm.go); so may a completion, on the word of the
//	   attempt's worker, which gave it up before starting it. The state
//	   records the index of the last election entry.
//	6  several start reports in one entry (op "starts", see starts.go).
//	7  a run that follows its parents (after:) takes the output key its
//	   leader rendered, sent in the entry's follow field, and is skipped
//	   if there is none; Apply executes no template (after.go).

// Versions that changed a rule, by name.
const (
	// vLeaderRendersKeys: a follower's output key comes in the entry.
	vLeaderRendersKeys = 7
)

// logVersionText is LogVersion as text, so that a test can build a binary
// of an older format with -ldflags
// "-X github.com/fencecron/fencecron/scheduler.logVersionText=1".
var logVersionText = "7"

// LogVersion is the newest log and snapshot format this binary reads, and
// the one it writes.
var LogVersion = mustVersion(logVersionText)

func mustVersion(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		panic(fmt.Sprintf("scheduler: log version %q is not a positive integer", s))
	}
	return v
}

// ErrLogHalted is returned for every entry a halted FSM is given, and
// wrapped by Halted.
var ErrLogHalted = errors.New("stopped applying the replicated log")

// knownOps are the ops this binary applies, with the first version that
// has them.
var knownOps = map[string]int{
	opElected: 1, opSetJobs: 1, opGrant: 1, opSkip: 1, opSkipRange: 1, opStart: 1,
	opComplete: 1, opExpire: 1, opRetry: 1, opPause: 1, opNote: 1, opAudit: 1,
	opGrants: 3, opCompletes: 3,
	opSkipRanges: 4,
	opNotified:   4,
	opBackfill:   4,
	opRelease:    4, opAdmit: 4,
	opStarts: 6,
}

// encodeEntry encodes c as an entry of this binary's version.
func encodeEntry(c command) ([]byte, error) {
	c.V = LogVersion
	return json.Marshal(c)
}

// decodeEntry reads an entry, or says why this binary cannot: such an
// entry halts the FSM.
func decodeEntry(l *raft.Log) (command, error) {
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return c, fmt.Errorf("entry %d cannot be decoded: %v", l.Index, err)
	}
	if c.V == 0 {
		c.V = 1
	}
	if c.V > LogVersion {
		return c, fmt.Errorf("entry %d (op %q) is of log format version %d; this binary reads up to version %d", l.Index, c.Op, c.V, LogVersion)
	}
	since, ok := knownOps[c.Op]
	if !ok || since > c.V {
		return c, fmt.Errorf("entry %d has op %q, unknown in log format version %d", l.Index, c.Op, c.V)
	}
	if !c.hasPayload() {
		return c, fmt.Errorf("entry %d (op %q, version %d) has no payload for its op", l.Index, c.Op, c.V)
	}
	return c, nil
}

// hasPayload reports whether the payload of c's op is set.
func (c command) hasPayload() bool {
	switch c.Op {
	case opElected:
		return c.Elected != nil
	case opSetJobs:
		return c.SetJobs != nil
	case opGrant, opSkip:
		return c.Grant != nil
	case opSkipRange:
		return c.SkipRange != nil
	case opStart:
		return c.Start != nil
	case opComplete:
		return c.Complete != nil
	case opExpire:
		return c.Expire != nil
	case opRetry:
		return c.Retry != nil
	case opPause:
		return c.Pause != nil
	case opNote:
		return c.Note != nil
	case opAudit:
		return c.Audit != nil
	case opGrants:
		return c.Grants != nil && len(c.Grants.Grants) > 0
	case opCompletes:
		return c.Completes != nil && len(c.Completes.Completions) > 0
	case opStarts:
		return c.Starts != nil && len(c.Starts.Starts) > 0
	case opSkipRanges:
		return c.SkipRanges != nil && len(c.SkipRanges.Ranges) > 0
	case opNotified:
		return c.Notified != nil
	case opBackfill:
		return c.Backfill != nil
	case opRelease:
		return c.Release != nil
	case opAdmit:
		return c.Admit != nil
	}
	return false
}

// halt stops the FSM at entry l for err; f.mu is held.
func (f *FSM) halt(l *raft.Log, err error) {
	f.halted = fmt.Errorf("%w at index %d (term %d): %v; this node applies nothing more until it runs a binary that reads it (upgrade it: see the README's upgrade rule)",
		ErrLogHalted, l.Index, l.Term, err)
	f.logHalts.Add(1)
	f.logger().Error("replicated log halted: an entry this binary cannot read", "index", l.Index, "term", l.Term, "err", err, "log_version", LogVersion)
}

// Halted returns nil while the FSM applies the log, and otherwise why it
// stopped (wrapping ErrLogHalted): an entry or snapshot of a newer format,
// an unknown op, an entry it could not decode. A halted node is not ready.
func (f *FSM) Halted() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halted
}

// LogHalts counts the times this node's FSM stopped at an entry or
// snapshot it could not read, since the process started.
func (f *FSM) LogHalts() uint64 { return f.logHalts.Load() }

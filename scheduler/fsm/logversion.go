package fsm

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/scheduler/replicated"
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
// What each version changed is the doc of its gates below; a rule that
// changed is read through its gate's name, never through a bare number.

// Log versions that changed a rule, by name.
const (
	// vDecideInApply (2): a grant decides uniqueness and overlap inside
	// Apply (forbid records a skip, replace cancels the open attempts in
	// the same entry, force overrides and is audited); notes and audit
	// entries take only known kinds, and a store_refused note counts in
	// stale_refused and fences the attempt it concerns; snapshots carry
	// their version. Version 1 entries were written before versions: the
	// leader decided overlap before proposing a grant.
	vDecideInApply = 2
	// vBatches (3): a batch grant (op "grants", sharing its token where
	// the runs' keys cannot meet, batch.go); a group of completions (op
	// "completes"); a completion records when the worker received the
	// dispatch (Attempt.AcceptedAt).
	vBatches = 3
	// vAhead (4): a grant may be marked ahead (proposed before the run's
	// fire time); Apply refuses it (ErrNotAhead) while the job has an open
	// run and overlap forbid or replace (pregrant.go).
	vAhead = 4
	// vSkipRanges (4): several ranges of skipped fire times in one entry
	// (op "skip_ranges", batch.go).
	vSkipRanges = 4
	// vStdoutTail (4): a completion records the end of stdout when it was
	// not published (Attempt.StdoutTail, output.go).
	vStdoutTail = 4
	// vClockSkew (4): an audit entry may be of kind clock_skew (scheduler/skewmonitor.go).
	vClockSkew = 4
	// vFollow (4): an entry that ends attempts or finishes runs records
	// the notifications due (notify.go) and decides the runs of the jobs
	// that follow them (after.go), granting them in that entry with the
	// workers its follow field names; op "notified" records deliveries.
	vFollow = 4
	// vBackfill (4): op "backfill" queues a job's fire times that have no
	// run and are after its retained horizon; a grant with trigger
	// backfill is admitted only for a queued time and while the job has
	// room for another backfill run (backfill.go).
	vBackfill = 4
	// vRelease (4): op "release", an operator ends an open attempt's
	// lease now; the attempt ends lost and its run is retried by its
	// policy (release.go).
	vRelease = 4
	// vGroups (4): a grant of a concurrency group's job takes a place,
	// waits in the group's queue, or is skipped when it is full; every
	// entry admits the oldest waiters while places are free; op "admit"
	// grants an admitted run's first attempt (groups.go).
	vGroups = 4
	// vTermStart (4): an entry that mints a token in an epoch whose
	// election entry is not yet applied is refused whole
	// (ErrTermNotStarted, termstart.go).
	vTermStart = 4
	// vNeverStarted (5): an expiry may carry the leader's word that the
	// attempt never started; Apply marks it so only for an attempt granted
	// in the entry's epoch after its election entry, and such an attempt
	// does not count against the job's retries (startconfirm.go); so may a
	// completion, on the word of its worker. The state records the index
	// of the last election entry.
	vNeverStarted = 5
	// vStartBatches (6): several start reports in one entry (op "starts",
	// starts.go).
	vStartBatches = 6
	// vLeaderRendersKeys (7): a run that follows its parents takes the
	// output key its leader rendered, sent in the entry's follow field,
	// and is skipped if there is none; Apply executes no template
	// (after.go).
	vLeaderRendersKeys = 7
	// vPreStartLease (8): an expiry may say that the short lease an
	// attempt holds until its start ran out (ExpireCmd.BeforeStart);
	// Apply refuses it unless DecidePreStartExpiry allows it, and
	// marks the attempt never started (prestart.go).
	vPreStartLease = 8
	// vJobsDiff (8): op "set_jobs_diff" changes the job set by
	// difference, against the set whose hash it names (jobsdiff.go).
	vJobsDiff = 8
	// vHTTPStatus (8): a completion of an HTTP job's attempt records the
	// response's status and size (Attempt.HTTPStatus, ResponseBytes).
	vHTTPStatus = 8
)

// ErrLogHalted is returned for every entry a halted FSM is given, and
// wrapped by Halted.
var ErrLogHalted = errors.New("stopped applying the replicated log")

// EncodeEntry encodes c as an entry of this binary's version.
func EncodeEntry(c replicated.Command) ([]byte, error) {
	c.V = replicated.LogVersion
	return json.Marshal(c)
}

// decodeEntry reads an entry, or says why this binary cannot: such an
// entry halts the FSM.
func decodeEntry(l *raft.Log) (replicated.Command, error) {
	var c replicated.Command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return c, fmt.Errorf("entry %d cannot be decoded: %v", l.Index, err)
	}
	if c.V == 0 {
		c.V = 1
	}
	if c.V > replicated.LogVersion {
		return c, fmt.Errorf("entry %d (op %q) is of log format version %d; this binary reads up to version %d", l.Index, c.Op, c.V, replicated.LogVersion)
	}
	o, ok := opsByName[c.Op]
	if !ok || o.since > c.V {
		return c, fmt.Errorf("entry %d has op %q, unknown in log format version %d", l.Index, c.Op, c.V)
	}
	if !o.has(&c) {
		return c, fmt.Errorf("entry %d (op %q, version %d) has no payload for its op", l.Index, c.Op, c.V)
	}
	return c, nil
}

// halt stops the FSM at entry l for err; f.mu is held.
func (f *FSM) halt(l *raft.Log, err error) {
	f.halted = fmt.Errorf("%w at index %d (term %d): %v; this node applies nothing more until it runs a binary that reads it (upgrade it: see the upgrade rule in docs/operations.md)",
		ErrLogHalted, l.Index, l.Term, err)
	f.logHalts.Add(1)
	f.logger().Error("replicated log halted: an entry this binary cannot read", "index", l.Index, "term", l.Term, "err", err, "log_version", replicated.LogVersion)
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

package fsm

import (
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
// What each version changed is the doc of its gate in
// scheduler/replicated/versions.go; a rule that changed is read through
// its gate's name, never through a bare number.

// ErrLogHalted is returned for every entry a halted FSM is given, and
// wrapped by Halted.
var ErrLogHalted = errors.New("stopped applying the replicated log")

// EncodeEntry encodes c as an entry of this binary's version.
func EncodeEntry(c replicated.Command) ([]byte, error) {
	c.V = replicated.LogVersion
	return replicated.EncodeCommand(c)
}

// decodeEntry reads an entry, or says why this binary cannot: such an
// entry halts the FSM.
func decodeEntry(l *raft.Log) (replicated.Command, error) {
	c, err := replicated.DecodeCommand(l.Data)
	if err != nil {
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

package fsm

import "github.com/fencecron/fencecron/jobs"

// Archive keeps what the FSM's bounded state lets go of: finished runs
// beyond MaxRuns and events beyond the audit trail's bound
// (scheduler/history.Store). The FSM calls it from Raft's one FSM
// goroutine.
type Archive interface {
	// Archive takes what the entry at index trimmed (often nothing). It
	// is called for every applied entry, under the FSM's lock: it must
	// neither block nor call the FSM.
	Archive(index uint64, runs []jobs.Run, events []jobs.Event)
	// Settle is called after each entry, outside the lock; it may block
	// to push back on the log when the archive falls behind.
	Settle()
	// Sync makes everything archived so far durable; the FSM calls it
	// before each snapshot, and takes none if it fails.
	Sync() error
	// Restored is told the index of a snapshot about to be restored:
	// what the archive never saw below it is a gap to fill from peers.
	// The FSM refuses the snapshot if it fails.
	Restored(index uint64) error
}

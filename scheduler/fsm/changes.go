package fsm

import "github.com/fencecron/fencecron/scheduler/fsm/feed"

// ChangeKind says what an applied entry changed.
type ChangeKind int

// Change kinds.
const (
	// ChangeEnded: an attempt ended (completed, fenced, expired,
	// cancelled), or its run, waiting for a retry, was finished without
	// one. The leader drops the attempt's lease and, if the run waits for
	// its next attempt, sets its retry timer.
	ChangeEnded ChangeKind = iota + 1
	// ChangeJobs: the job set changed; the leader updates its queue.
	ChangeJobs
	// ChangeResync: the subscriber cannot trust what it was told (the
	// state was restored from a snapshot, or it fell behind and changes
	// were dropped): it must read the replicated state again.
	ChangeResync
	// ChangeRestored: the state was replaced by a snapshot (FSM.Restore).
	// It says all ChangeResync says; besides, under a running leader only
	// an operator's restore (raft.Restore) does that, and the leader then
	// starts a new epoch, as a newly elected one would.
	ChangeRestored
	// ChangeGranted: a run of a job with after was granted because its
	// parents succeeded (after.go); the leader dispatches it.
	ChangeGranted
	// ChangeAdmitted: a run waiting for a place in its concurrency group
	// was admitted (groups.go); the leader grants its first attempt.
	ChangeAdmitted
)

// Change is a typed notification of something an applied entry changed
// that the leader acts on.
type Change struct {
	Kind ChangeKind
	// Index is the log index of the entry.
	Index uint64
	// Run and Attempt name what ended (ChangeEnded).
	Run, Attempt string
}

// maxPendingChanges bounds what a feed holds for a subscriber that does
// not read: past it the feed drops them all and says ChangeResync.
const maxPendingChanges = 4096

// ChangeFeed delivers the FSM's changes to one subscriber, in order.
// Nothing is lost silently: a subscriber that lags beyond
// maxPendingChanges gets ChangeResync instead of what was dropped.
type ChangeFeed = feed.Feed[Change]

// Changes subscribes to the FSM's changes; Close ends the subscription.
func (f *FSM) Changes() *ChangeFeed { return f.changeHub.Subscribe() }

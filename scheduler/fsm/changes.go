package fsm

import "sync"

// ChangeKind says what an applied entry changed.
type ChangeKind int

// Change kinds.
const (
	// ChangeEnded: an attempt ended (completed, fenced, expired,
	// cancelled), or its run, waiting for a retry, was finished without
	// one. The leader drops the attempt's lease and, if the run waits for
	// its next attempt, sets its retry timer.
	ChangeEnded ChangeKind = iota + 1
	// ChangeJobs: the job set changed; the leader rebuilds its queue.
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
// maxPendingChanges gets ChangeResync instead of what was dropped. Its
// methods are safe for concurrent use.
type ChangeFeed struct {
	f       *FSM
	mu      sync.Mutex
	pending []Change
	resync  bool
	ready   chan struct{}
}

// Changes subscribes to the FSM's changes; Close ends the subscription.
func (f *FSM) Changes() *ChangeFeed {
	c := &ChangeFeed{f: f, ready: make(chan struct{}, 1)}
	f.feedsMu.Lock()
	f.feeds[c] = true
	f.feedsMu.Unlock()
	return c
}

// Ready is signalled, coalesced, when Take has something.
func (c *ChangeFeed) Ready() <-chan struct{} { return c.ready }

// Take returns the changes since the last Take, oldest first; after an
// overflow it returns a single ChangeResync.
func (c *ChangeFeed) Take() []Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.pending
	if c.resync {
		out = []Change{{Kind: ChangeResync}}
	}
	c.pending, c.resync = nil, false
	return out
}

// Close ends the subscription.
func (c *ChangeFeed) Close() {
	c.f.feedsMu.Lock()
	delete(c.f.feeds, c)
	c.f.feedsMu.Unlock()
}

func (c *ChangeFeed) add(chs []Change) {
	c.mu.Lock()
	switch {
	case c.resync:
	case len(c.pending)+len(chs) > maxPendingChanges:
		c.pending, c.resync = nil, true
	default:
		c.pending = append(c.pending, chs...)
	}
	c.mu.Unlock()
	notify(c.ready)
}

// publish hands the changes of the entries just applied to every feed.
func (f *FSM) publish(chs []Change) {
	if len(chs) == 0 {
		return
	}
	f.feedsMu.Lock()
	defer f.feedsMu.Unlock()
	for c := range f.feeds {
		c.add(chs)
	}
}

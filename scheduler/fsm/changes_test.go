package fsm

import "testing"

// The FSM's feed is bounded at maxPendingChanges and, past it, tells the
// leader to read the state again (the mechanism is scheduler/fsm/feed's).
func TestChangeFeed_OverflowSaysResync(t *testing.T) {
	f := withJobs(t, "report")
	feed := f.Changes()
	defer feed.Close()
	f.changeHub.Publish(make([]Change, maxPendingChanges+1))
	if got := feed.Take(); len(got) != 1 || got[0].Kind != ChangeResync {
		t.Errorf("after an overflow: %+v, want one resync", got)
	}
}

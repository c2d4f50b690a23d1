package fsm

import "testing"

// A feed whose reader lags loses nothing silently: past its bound it
// says resync.
func TestChangeFeed_OverflowSaysResync(t *testing.T) {
	f := withJobs(t, "report")
	feed := f.Changes()
	defer feed.Close()
	chs := make([]Change, maxPendingChanges)
	f.publish(chs)
	if got := feed.Take(); len(got) != maxPendingChanges {
		t.Fatalf("took %d, want %d", len(got), maxPendingChanges)
	}
	f.publish(chs)
	f.publish([]Change{{Kind: ChangeEnded}})
	if got := feed.Take(); len(got) != 1 || got[0].Kind != ChangeResync {
		t.Errorf("after an overflow: %+v, want one resync", got)
	}
	if got := feed.Take(); len(got) != 0 {
		t.Errorf("after the resync: %+v, want nothing", got)
	}
}

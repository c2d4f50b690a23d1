package jobs

import (
	"testing"
	"time"
)

func TestAttemptID_SplitsBackIntoRunAndNumber(t *testing.T) {
	run := RunID("backup", time.Date(2026, 12, 3, 21, 0, 0, 500_000_000, time.UTC))
	for _, n := range []int{1, 2, 10, 12345} {
		id := AttemptID(run, n)
		gotRun, gotN, ok := SplitAttemptID(id)
		if !ok || gotRun != run || gotN != n {
			t.Errorf("SplitAttemptID(%q) = %q, %d, %v; want %q, %d, true", id, gotRun, gotN, ok, run, n)
		}
	}
}

func TestSplitAttemptID_RefusesWhatNoAttemptIDLooksLike(t *testing.T) {
	for _, id := range []string{
		"",
		"backup",
		".1",
		"backup@20261203T210000Z.0",
		"backup@20261203T210000Z.-1",
		"backup@20261203T210000Z.x",
		"backup@20261203T210000Z.2x",
		// A run id with milliseconds is not an attempt id: its last dot
		// is the seconds'.
		"backup@20261203T210000.500Z",
	} {
		if run, n, ok := SplitAttemptID(id); ok {
			t.Errorf("SplitAttemptID(%q) = %q, %d, true; want false", id, run, n)
		}
	}
}

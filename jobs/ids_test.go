package jobs

import (
	"fmt"
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

// The state machine splits the ids of entries already in the log: what
// SplitAttemptID accepts must stay what fmt.Sscanf's %d accepted, or a
// replica of a newer version would apply an old entry differently.
func TestSplitAttemptID_ReadsAsSscanfDid(t *testing.T) {
	const run = "backup@20261203T210000Z"
	for _, num := range []string{"1", "01", "+1", "12", "0", "-1", "", "x", "2x", "1 ", " 1", "\t1", "1\n", "1_0",
		"99999999999999999999", "9223372036854775807", "٣"} {
		var want int
		_, err := fmt.Sscanf(num, "%d", &want)
		wantOK := err == nil && want >= 1
		gotRun, got, ok := SplitAttemptID(run + "." + num)
		if ok != wantOK || ok && (got != want || gotRun != run) {
			t.Errorf("SplitAttemptID(%q) = %q, %d, %v; Sscanf read %d, %v", run+"."+num, gotRun, got, ok, want, err)
		}
	}
	for _, id := range []string{"", "backup", ".1"} {
		if _, _, ok := SplitAttemptID(id); ok {
			t.Errorf("SplitAttemptID(%q) accepted an id without a run", id)
		}
	}
}

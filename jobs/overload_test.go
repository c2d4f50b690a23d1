package jobs

import (
	"testing"
	"time"
)

// Only skips shed for overload count; one more than OverloadQuiet after
// the last starts another overload.
func TestOverload_Note(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var o Overload
	o.Note(SkipRange{Job: "a", Count: 4, Reason: "missed (misfire: skip)"}, t0)
	if o != (Overload{}) || o.Active(t0) {
		t.Fatalf("a misfire skip counted as overload: %+v", o)
	}
	o.Note(SkipRange{Job: "a", Count: 2, Reason: OverloadReason + " every worker ..."}, t0)
	o.Note(SkipRange{Job: "b", Count: 3, Reason: OverloadReason + " every worker ..."}, t0.Add(OverloadQuiet))
	if o.Since != t0 || o.Last != t0.Add(OverloadQuiet) || o.Skipped != 5 || !o.Active(t0.Add(2*OverloadQuiet)) || o.Active(t0.Add(2*OverloadQuiet+time.Second)) {
		t.Fatalf("one overload: %+v", o)
	}
	later := t0.Add(2*OverloadQuiet + time.Second)
	o.Note(SkipRange{Job: "a", Count: 1, Reason: OverloadReason + " every worker ..."}, later)
	if o.Since != later || o.Skipped != 6 {
		t.Errorf("a second overload: %+v, want since %v", o, later)
	}
}

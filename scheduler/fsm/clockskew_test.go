package fsm

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A clock_skew audit entry is of log version 4: one in an older entry
// is refused.
func TestFSM_ClockSkewAuditIsVersion4(t *testing.T) {
	f := withJobs(t, "report")
	ok := replicated.Command{Op: replicated.OpAudit, Audit: &replicated.AuditCmd{Kind: jobs.EventClockSkew, Node: "n1", Detail: "n3's clock is 3.000s ahead of n1's", At: t0}}
	if res := applyAt(t, f, 2, 10, ok); res.Err != nil {
		t.Fatalf("version %d: %v", replicated.LogVersion, res.Err)
	}
	evs := f.Events(0, 100)
	if e := evs[len(evs)-1]; e.Kind != jobs.EventClockSkew || !strings.Contains(e.Detail, "3.000s ahead") {
		t.Errorf("last event %+v", e)
	}
	old := ok
	old.V = 3
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if res := applyRaw(t, f, 2, 11, b); res.Err == nil {
		t.Errorf("a version 3 clock_skew entry applied")
	}
}

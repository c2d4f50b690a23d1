package fsm

import (
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A group of starts applies each as a start of its own would: one that
// names no attempt fails alone, a repeated one changes nothing.
func TestFSM_StartsGroup(t *testing.T) {
	f := withJobs(t, "a", "b")
	ga := applyAt(t, f, 2, 10, grant("a", t0))
	gb := applyAt(t, f, 2, 11, grant("b", t0))
	aa, _ := ga.Run.Latest()
	ab, _ := gb.Run.Latest()
	at := t0.Add(time.Second)
	group := &replicated.StartsCmd{Starts: []replicated.StartCmd{{Attempt: aa.ID, At: at}, {Attempt: "nope@20260701T090005Z.1", At: at}, {Attempt: ab.ID, At: at}, {Attempt: aa.ID, At: at.Add(time.Second)}}}
	res := applyAt(t, f, 2, 12, replicated.Command{Op: replicated.OpStarts, Starts: group})
	checkGroupOfFour(t, res)
	for _, id := range []string{ga.Run.ID, gb.Run.ID} {
		if r, _ := f.Run(id); r.State != jobs.Running || !r.Attempts[0].StartedAt.Equal(at) {
			t.Errorf("%s: state %s, started %v; want running, started at %v (the first report)", id, r.State, r.Attempts[0].StartedAt, at)
		}
	}
}

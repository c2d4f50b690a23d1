package scheduler

import (
	"slices"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// Changing one job among 100,000 appends one small entry to the log: the
// difference, not the set (which is about 32 MB), and the replicated set
// is then the one applied, with its hash.
func TestSetJobs_OneChangeAmong100kIsOneSmallEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("applies a set of 100,000 jobs (seconds): run without -short")
	}
	l, sm := newTestLeader(t)
	r := l.s.Raft.(*fakeRaft)
	specs := scaleSpecs(100_000)
	if _, err := l.s.SetJobs(t.Context(), specs, "scale"); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	whole, entries := r.sizes[len(r.sizes)-1], len(r.sizes)
	r.mu.Unlock()

	changed := slices.Clone(specs)
	changed[54_321].Command = []string{"/bin/false"}
	hash, err := l.s.SetJobs(t.Context(), changed, "scale")
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	heads, sizes := slices.Clone(r.heads[entries:]), slices.Clone(r.sizes[entries:])
	r.mu.Unlock()
	if len(sizes) != 1 || !strings.Contains(heads[0], `"op":"set_jobs_diff"`) || sizes[0] > 64<<10 {
		t.Fatalf("changing one job of 100,000 appended %d entries of %v bytes (%q); want one job set difference of at most 64 KiB", len(sizes), sizes, heads)
	}
	t.Logf("one change: a %d-byte entry; the whole set was %d bytes", sizes[0], whole)
	if got, want := sm.JobSetInfo().Hash, jobs.HashSpecs(changed); got != want || hash != want {
		t.Errorf("job set hash %s (answered %s), want %s", got, hash, want)
	}
	if s, _ := sm.Spec(changed[54_321].Name); !slices.Equal(s.Command, []string{"/bin/false"}) || sm.JobSetInfo().Count != 100_000 {
		t.Errorf("after the change: %s runs %v, %d jobs; want /bin/false, 100000", s.Name, s.Command, sm.JobSetInfo().Count)
	}
	if fsm.MaxJobsDiffBytes > 64<<10 {
		t.Errorf("MaxJobsDiffBytes %d: a difference may be larger than 64 KiB", fsm.MaxJobsDiffBytes)
	}
}

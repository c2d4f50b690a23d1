package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// A set of 100,000 jobs (about 30 MB) reaches the log in entries of at
// most fsm.MaxJobsDiffBytes; changing one job among them then appends one
// small entry: the difference, not the set. The replicated set is each
// time the one applied, with its hash.
func TestSetJobs_OneChangeAmong100kIsOneSmallEntry(t *testing.T) {
	if testing.Short() || raceEnabled {
		// Under the race detector a minute, for code that runs on one
		// goroutine: TestSetJobs_LargeSetTravelsInParts covers it there.
		t.Skip("applies a set of 100,000 jobs (seconds; a minute with -race): run without -short or -race")
	}
	l, sm := newTestLeader(t)
	r := l.s.Raft.(*fakeRaft)
	r.mu.Lock()
	entries := len(r.sizes)
	r.mu.Unlock()
	specs := jobstest.Daily(100_000)
	if _, err := l.s.SetJobs(t.Context(), specs, "scale", nil); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	first := slices.Clone(r.sizes[entries:])
	entries = len(r.sizes)
	r.mu.Unlock()
	whole := 0
	for _, n := range first {
		whole += n
		if n > fsm.MaxJobsDiffBytes {
			t.Errorf("an entry of %d bytes in the first set's %d; want at most %d", n, len(first), fsm.MaxJobsDiffBytes)
		}
	}
	if got := sm.JobSetInfo(); got.Count != 100_000 || got.Hash != jobs.HashSpecs(specs) {
		t.Fatalf("after the first set: %d jobs of hash %s; want 100000 of %s", got.Count, got.Hash, jobs.HashSpecs(specs))
	}

	changed := slices.Clone(specs)
	changed[54_321].Command = []string{"/bin/false"}
	hash, err := l.s.SetJobs(t.Context(), changed, "scale", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	heads, sizes := slices.Clone(r.heads[entries:]), slices.Clone(r.sizes[entries:])
	r.mu.Unlock()
	if len(sizes) != 1 || !strings.Contains(heads[0], `"op":"set_jobs_diff"`) || sizes[0] > 64<<10 {
		t.Fatalf("changing one job of 100,000 appended %d entries of %v bytes (%q); want one job set difference of at most 64 KiB", len(sizes), sizes, heads)
	}
	t.Logf("one change: a %d-byte entry; the whole set was %d bytes in %d entries", sizes[0], whole, len(first))
	if got, want := sm.JobSetInfo().Hash, jobs.HashSpecs(changed); got != want || hash != want {
		t.Errorf("job set hash %s (answered %s), want %s", got, hash, want)
	}
	if s, _ := sm.Spec(changed[54_321].Name); !slices.Equal(s.Command, []string{"/bin/false"}) || sm.JobSetInfo().Count != 100_000 {
		t.Errorf("after the change: %s runs %v, %d jobs; want /bin/false, 100000", s.Name, s.Command, sm.JobSetInfo().Count)
	}
}

// A set larger than one entry reaches the log in parts, each at most
// fsm.MaxJobsDiffBytes, and the set changes whole when the last is
// applied; a change then is one entry again.
func TestSetJobs_LargeSetTravelsInParts(t *testing.T) {
	l, sm := newTestLeader(t)
	r := l.s.Raft.(*fakeRaft)
	r.mu.Lock()
	entries := len(r.sizes)
	r.mu.Unlock()
	specs := jobstest.Daily(4_000) // about 1.2 MB
	if _, err := l.s.SetJobs(t.Context(), specs, "scale", nil); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	sizes := slices.Clone(r.sizes[entries:])
	entries = len(r.sizes)
	r.mu.Unlock()
	if len(sizes) < 2 || slices.Max(sizes) > fsm.MaxJobsDiffBytes {
		t.Errorf("a set of 4,000 jobs in %d entries of %v bytes; want several, each at most %d", len(sizes), sizes, fsm.MaxJobsDiffBytes)
	}
	if got := sm.JobSetInfo(); got.Count != 4_000 || got.Hash != jobs.HashSpecs(specs) {
		t.Fatalf("after the set: %d jobs of hash %s; want 4000 of %s", got.Count, got.Hash, jobs.HashSpecs(specs))
	}
	changed := slices.Delete(slices.Clone(specs), 10, 11)
	if _, err := l.s.SetJobs(t.Context(), changed, "scale", nil); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	sizes = slices.Clone(r.sizes[entries:])
	r.mu.Unlock()
	if len(sizes) != 1 || sizes[0] > 1<<10 {
		t.Errorf("removing one job: %d entries of %v bytes; want one small entry", len(sizes), sizes)
	}
	if got := sm.JobSetInfo(); got.Count != 3_999 || got.Hash != jobs.HashSpecs(changed) {
		t.Errorf("after removing one: %d jobs of hash %s; want 3999 of %s", got.Count, got.Hash, jobs.HashSpecs(changed))
	}
}

// An apply with a scope replaces the jobs of the namespaces it matches
// and keeps every other namespace's as the replicated set has them when
// the leader applies it: two teams applying one after the other keep
// each other's jobs, whatever set either read before. A job outside the
// scope, or a bad glob, is refused and changes nothing.
func TestSetJobs_Scope(t *testing.T) {
	l, sm := newTestLeader(t)
	spec := func(ns, name, shell string) jobs.Spec {
		return jobs.Spec{Name: name, Namespace: ns, Schedules: []string{"@every 1m"}, Shell: shell}
	}
	if _, err := l.s.SetJobs(t.Context(), []jobs.Spec{spec("", "report", "true"), spec("team-a", "build", "true"), spec("team-b", "build", "true")}, "ops", nil); err != nil {
		t.Fatal(err)
	}
	names := func() string {
		set, _, _, _ := sm.JobSet()
		var out []string
		for _, s := range set {
			out = append(out, s.Name+"="+s.Shell)
		}
		return strings.Join(out, " ")
	}
	if _, err := l.s.SetJobs(t.Context(), []jobs.Spec{spec("team-a", "build", "a2"), spec("team-a", "lint", "a3")}, "team-a", []string{"team-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.s.SetJobs(t.Context(), []jobs.Spec{spec("team-b", "test", "b2")}, "team-b", []string{"team-b"}); err != nil {
		t.Fatal(err)
	}
	want := "report=true team-a:build=a2 team-a:lint=a3 team-b:test=b2"
	if got := names(); got != want {
		t.Fatalf("after team-a's and team-b's applies: %s; want %s", got, want)
	}
	hash := sm.JobSetInfo().Hash
	for _, tc := range []struct {
		specs []jobs.Spec
		scope []string
		says  string
	}{
		{[]jobs.Spec{spec("team-b", "x", "true")}, []string{"team-a"}, "outside the apply's namespaces"},
		{[]jobs.Spec{spec("", "x", "true")}, []string{"team-a"}, "namespace default"},
		{[]jobs.Spec{spec("team-a", "x", "true")}, []string{"team-a["}, "bad namespace glob"},
	} {
		_, err := l.s.SetJobs(t.Context(), tc.specs, "bad", tc.scope)
		if !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("apply %v scoped %v: %v, want invalid saying %q", tc.specs[0].Name, tc.scope, err, tc.says)
		}
	}
	if got := sm.JobSetInfo().Hash; got != hash || names() != want {
		t.Errorf("a refused apply changed the set: %s (%s)", names(), got)
	}
}

// Two teams apply at once, each a difference too large for one entry:
// both answer with the set's hash, and the set holds both teams' jobs.
// (The FSM stages one difference's parts at a time; interleaved parts
// of two would leave neither applied.)
func TestSetJobs_ConcurrentLargeApplies(t *testing.T) {
	l, sm := newTestLeader(t)
	team := func(ns string) []jobs.Spec {
		var out []jobs.Spec
		for i := range 1500 {
			out = append(out, jobs.Spec{Name: fmt.Sprintf("j%d", i), Namespace: ns, Schedules: []string{"@daily"}, Shell: strings.Repeat("x", 1000)})
		}
		return out
	}
	errs := make(chan error, 2)
	for _, ns := range []string{"team-a", "team-b"} {
		go func() {
			_, err := l.s.SetJobs(t.Context(), team(ns), ns, []string{ns})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := sm.JobSetInfo().Count; got != 3000 {
		t.Errorf("after both teams' applies the set holds %d jobs, want 3000", got)
	}
}

// A set some of whose jobs are marked as the replicated set's
// (SetJobsKnown, an apply by digest) becomes the replicated set exactly
// as SetJobs would make it: one small entry for one change; the checks of
// the set as a whole still refuse a job defined twice and a job that
// follows a removed one; and marks made against a set that another apply
// replaced since are not trusted, so a job that set changed is not left
// as it was.
func TestSetJobsKnown(t *testing.T) {
	l, sm := newTestLeader(t)
	r := l.s.Raft.(*fakeRaft)
	specs := jobstest.Daily(100)
	specs[1].After, specs[1].Schedules = []string{specs[0].Name}, nil
	if _, err := l.s.SetJobs(t.Context(), specs, "first", nil); err != nil {
		t.Fatal(err)
	}
	base := sm.JobSetInfo().Hash
	allKept := func(n int) []bool { return slices.Repeat([]bool{true}, n) }

	changed := slices.Clone(specs)
	changed[50].Command = []string{"/bin/false"}
	kept := allKept(len(changed))
	kept[50] = false
	r.mu.Lock()
	entries := len(r.sizes)
	r.mu.Unlock()
	hash, err := l.s.SetJobsKnown(t.Context(), changed, KnownJobs{Base: base, Kept: kept}, "one change", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	sizes := slices.Clone(r.sizes[entries:])
	r.mu.Unlock()
	// The replicated set is hashed here, not read: the FSM keeps the hash
	// the leader declares.
	if got := jobs.HashSpecs(jobs.Values(sm.ExportJobSet().Jobs)); len(sizes) != 1 || sizes[0] > 1<<10 || hash != jobs.HashSpecs(changed) || got != hash {
		t.Errorf("one change: %d entries of %v bytes, hash %s (of the replicated set %s); want one small entry and hash %s", len(sizes), sizes, hash, got, jobs.HashSpecs(changed))
	}
	if s, _ := sm.Spec(changed[50].Name); !slices.Equal(s.Command, []string{"/bin/false"}) {
		t.Errorf("job 50 runs %v after the change; want /bin/false", s.Command)
	}

	for name, bad := range map[string][]jobs.Spec{
		"a job defined twice":           append(slices.Clone(changed), changed[3]),
		"a job following a removed one": slices.Delete(slices.Clone(changed), 0, 1),
	} {
		kept := allKept(len(bad))
		if _, err := l.s.SetJobsKnown(t.Context(), bad, KnownJobs{Base: hash, Kept: kept}, "bad", nil); !errors.Is(err, jobs.ErrInvalidConfig) {
			t.Errorf("%s, every job marked known: %v; want it refused as invalid", name, err)
		}
		if sm.JobSetInfo().Hash != hash {
			t.Fatalf("%s changed the replicated set", name)
		}
	}

	// Marks made against the first set, after another apply changed job
	// 50: the leader compares every job, and job 50 becomes what the set
	// sent says, not what the replicated set has.
	if _, err := l.s.SetJobsKnown(t.Context(), specs, KnownJobs{Base: base, Kept: allKept(len(specs))}, "stale marks", nil); err != nil {
		t.Fatal(err)
	}
	if got := jobs.HashSpecs(jobs.Values(sm.ExportJobSet().Jobs)); got != jobs.HashSpecs(specs) {
		t.Errorf("after an apply with stale marks the replicated set hashes to %s; want the sent set's %s", got, jobs.HashSpecs(specs))
	}
	if s, _ := sm.Spec(specs[50].Name); !slices.Equal(s.Command, []string{"/bin/true"}) {
		t.Errorf("job 50 runs %v after an apply with stale marks; want /bin/true, as sent", s.Command)
	}

	// Marks against a set this process checked under other limits: a
	// kept job the store's cap now refuses is refused.
	big := slices.Clone(specs)
	for i := range big {
		big[i].MaxOutputBytes = 1 << 20
	}
	big[7].MaxOutputBytes = 8 << 20
	if _, err := l.s.SetJobs(t.Context(), big, "big output", nil); err != nil {
		t.Fatal(err)
	}
	cap := l.s.MaxBodyBytes
	l.s.MaxBodyBytes = 4 << 20
	t.Cleanup(func() { l.s.MaxBodyBytes = cap })
	again := slices.Clone(big)
	again[60].Command = []string{"/bin/false"}
	kept = allKept(len(again))
	kept[60] = false
	_, err = l.s.SetJobsKnown(t.Context(), again, KnownJobs{Base: sm.JobSetInfo().Hash, Kept: kept}, "smaller cap", nil)
	if !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), big[7].Name) || strings.Contains(err.Error(), big[60].Name) {
		t.Errorf("a kept job over the store's new cap: %v; want it refused", err)
	}
}

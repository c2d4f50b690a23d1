package scheduler

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
)

// A worker that holds its limit of open attempts is given no more; when
// every worker a job may run on does, the pick says the cluster is
// overloaded, not that no worker matches. An HTTP job's attempt weighs an
// eighth of a process's: a node holds eight of them for each process.
func TestPickWorker_Limit(t *testing.T) {
	members := []election.Member{
		{Name: "w1", State: "alive", Meta: election.Meta{HTTPAddr: "h1", MaxAttempts: 2, Tags: map[string]string{"zone": "a"}}},
		{Name: "w2", State: "alive", Meta: election.Meta{HTTPAddr: "h2", MaxAttempts: 3, Tags: map[string]string{"zone": "b"}}},
	}
	any := jobs.Spec{Name: "j"}
	web := jobs.Spec{Name: "j", HTTP: &jobs.HTTP{URL: "http://127.0.0.1:9/"}}
	const p = jobs.ProcessLoad
	for _, tc := range []struct {
		load map[string]int
		spec jobs.Spec
		want string
		err  error
	}{
		{map[string]int{"w1": 1 * p, "w2": 2 * p}, any, "w1", nil},
		{map[string]int{"w1": 2 * p, "w2": 2 * p}, any, "w2", nil},
		{map[string]int{"w1": 2 * p, "w2": 3 * p}, any, "", errWorkersFull},
		{map[string]int{"w1": 0, "w2": 3 * p}, jobs.Spec{Name: "j", Target: map[string]string{"zone": "b"}}, "", errWorkersFull},
		{map[string]int{}, jobs.Spec{Name: "j", Target: map[string]string{"zone": "c"}}, "", nil},
		// w1 has room for one more request, not for a process.
		{map[string]int{"w1": 2*p - 1, "w2": 3 * p}, web, "w1", nil},
		{map[string]int{"w1": 2*p - 1, "w2": 3 * p}, any, "", errWorkersFull},
		{map[string]int{"w1": 2 * p, "w2": 3 * p}, web, "", errWorkersFull},
	} {
		got, err := pickWorker(members, tc.load, tc.spec, "j@1", "", nil)
		switch {
		case tc.want == "" && tc.err == nil && (err == nil || errors.Is(err, errWorkersFull) || !strings.Contains(err.Error(), "no alive worker matches")):
			t.Errorf("load %v target %v: %q, %v; want no worker matches", tc.load, tc.spec.Target, got, err)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("load %v target %v: %q, %v; want %v", tc.load, tc.spec.Target, got, err, tc.err)
		case tc.want != "" && (got != tc.want || err != nil):
			t.Errorf("load %v target %v: %q, %v; want %s", tc.load, tc.spec.Target, got, err, tc.want)
		}
	}
	if got := (election.Meta{}).AttemptLimit(); got != election.DefaultMaxAttempts {
		t.Errorf("a node of an older release takes %d, want the default %d", got, election.DefaultMaxAttempts)
	}
}

// Five jobs due at once on a worker that takes two: the leader grants two
// and records the other three as skipped, overloaded, in one entry; the
// replicated state then says the cluster is overloaded since that entry,
// and a manual trigger of another job meanwhile is skipped for the same
// reason.
func TestLeader_ShedsWhatNoWorkerHasRoomFor(t *testing.T) {
	var specs []jobs.Spec
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		specs = append(specs, spec(n, jobs.MisfireAll, jobs.OverlapAllow))
	}
	l, sm := newTestLeader(t, append(specs, spec("f", jobs.MisfireAll, jobs.OverlapAllow))...)
	r := l.s.Raft.(*fakeRaft)
	r.maxAttempts = 2
	r.mu.Lock()
	entries := len(r.heads)
	r.mu.Unlock()
	var fires []dueFire
	for _, s := range specs {
		s, _ := sm.Spec(s.Name)
		fires = append(fires, dueFire{s, base})
	}
	l.fireMany(fires)

	open := sm.OpenLoadByWorker()["n1"] / jobs.ProcessLoad
	var shed []jobs.SkipRange
	for _, s := range specs {
		for _, sk := range sm.Skips(s.Name) {
			if strings.HasPrefix(sk.Reason, jobs.OverloadReason) {
				shed = append(shed, sk)
			}
		}
	}
	if open != 2 || len(shed) != 3 {
		t.Fatalf("%d attempts open, %d fire times shed; want 2 and 3", open, len(shed))
	}
	r.mu.Lock()
	skipEntries := 0
	for _, h := range r.heads[entries:] {
		if strings.Contains(h, `"op":"skip_range`) {
			skipEntries++
		}
	}
	r.mu.Unlock()
	if skipEntries != 1 {
		t.Errorf("the shed fire times took %d entries, want 1", skipEntries)
	}
	o := sm.Overload()
	if o.Skipped != 3 || !o.Active(base) || o.Since.IsZero() {
		t.Errorf("overload = %+v, want 3 skipped and going on", o)
	}
	run, err := l.trigger(t.Context(), "f", false, l.s.now(), l.s.now())
	if err != nil || run.State != jobs.Skipped || !strings.HasPrefix(run.Reason, jobs.OverloadReason) {
		t.Errorf("a trigger with the worker full: %s %q, %v; want skipped, overloaded", run.State, run.Reason, err)
	}
}

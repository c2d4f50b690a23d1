package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/scheduler/fsm/setdiff"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestDecideJobsDiff(t *testing.T) {
	spec := func(name, shell string) jobs.Spec { return jobs.Spec{Name: name, Shell: shell} }
	cur := []jobs.Spec{spec("a", "1"), spec("b", "1"), spec("c", "1")}
	byName := map[string]int{"a": 0, "b": 1, "c": 2}
	names := func(specs []*jobs.Spec) (out []string) {
		for _, s := range specs {
			out = append(out, s.Name+"="+s.Shell)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		d      replicated.SetJobsDiffCmd
		want   []string
		errIs  error
		failed bool
	}{
		{"change, add, remove", replicated.SetJobsDiffCmd{Base: "h", Upsert: []jobs.Spec{spec("d", "1"), spec("b", "2")}, Remove: []string{"a"}}, []string{"b=2", "c=1", "d=1"}, nil, false},
		{"nothing", replicated.SetJobsDiffCmd{Base: "h"}, []string{"a=1", "b=1", "c=1"}, nil, false},
		{"against another set", replicated.SetJobsDiffCmd{Base: "other", Remove: []string{"a"}}, nil, ErrJobsDiffBase, true},
		{"removes a job not in the set", replicated.SetJobsDiffCmd{Base: "h", Remove: []string{"x"}}, nil, jobs.ErrInvalidConfig, true},
		{"names a job twice", replicated.SetJobsDiffCmd{Base: "h", Upsert: []jobs.Spec{spec("a", "2")}, Remove: []string{"a"}}, nil, jobs.ErrInvalidConfig, true},
	} {
		got, err := DecideJobsDiff(jobs.Addrs(cur), byName, "h", tc.d.Base, jobs.Addrs(tc.d.Upsert), tc.d.Remove)
		if tc.failed {
			if !errors.Is(err, tc.errIs) {
				t.Errorf("%s: err %v, want %v", tc.name, err, tc.errIs)
			}
			continue
		}
		if err != nil || !slices.Equal(names(got), tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, names(got), err, tc.want)
		}
	}
	if !slices.Equal(names(jobs.Addrs(cur)), []string{"a=1", "b=1", "c=1"}) {
		t.Errorf("the current set changed: %v", names(jobs.Addrs(cur)))
	}
}

// A difference the leader computed with JobSetBase.Diff, applied, gives the set
// it was computed for, with that set's hash; applied again (its base is
// gone) it changes nothing.
func TestFSM_SetJobsDiff(t *testing.T) {
	f := NewFSM()
	first := []jobs.Spec{jobstest.EveryMinute("a", "true"), jobstest.EveryMinute("b", "true"), jobstest.EveryMinute("c", "true")}
	applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: first, Source: "test", Hash: jobs.HashSpecs(first)}})
	next := []jobs.Spec{jobstest.EveryMinute("c", "true"), jobstest.EveryMinute("b", "false"), jobstest.EveryMinute("d", "true")}
	b := f.JobSetBase()
	base := b.Hash
	upsert, remove := setdiff.Of(b.Jobs, b.ByName, next, nil)
	if base != jobs.HashSpecs(first) || len(upsert) != 2 || !slices.Equal(remove, []string{"a"}) {
		t.Fatalf("Diff = %s, %d upserts, removes %v; want the first set's hash, b and d, a", base, len(upsert), remove)
	}
	d := &replicated.SetJobsDiffCmd{Base: base, Upsert: upsert, Remove: remove, Hash: jobs.HashSpecs(next), Source: "test"}
	if res := applyAt(t, f, 1, 2, replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: d}); res.Err != nil {
		t.Fatal(res.Err)
	}
	got, _, _, _ := f.JobSet()
	if h := jobs.HashSpecs(got); h != jobs.HashSpecs(next) || f.JobSetInfo().Hash != h {
		t.Errorf("after the difference: hash %s (recorded %s), want %s, the set it was computed for", h, f.JobSetInfo().Hash, jobs.HashSpecs(next))
	}
	if res := applyAt(t, f, 1, 3, replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: d}); !errors.Is(res.Err, ErrJobsDiffBase) {
		t.Errorf("the same difference again: %v, want %v", res.Err, ErrJobsDiffBase)
	}
	b = NewFSM().JobSetBase()
	if upsert, remove := setdiff.Of(b.Jobs, b.ByName, next, nil); b.Hash != "" || len(upsert) != len(next) || len(remove) != 0 {
		t.Errorf("Diff with no set yet: %q, %d upserts, %v; want every job", b.Hash, len(upsert), remove)
	}
}

// A difference in parts changes the set when its last part is applied,
// not before, whatever order the parts come in; a part applied again
// changes nothing; a part of another difference replaces a stage left
// unfinished.
func TestFSM_SetJobsDiffInParts(t *testing.T) {
	f := NewFSM()
	set := []jobs.Spec{jobstest.EveryMinute("a", "true"), jobstest.EveryMinute("b", "true"), jobstest.EveryMinute("c", "true")}
	hash := jobs.HashSpecs(set)
	part := func(hash string, i int, specs ...jobs.Spec) replicated.Command {
		return replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &replicated.SetJobsDiffCmd{Base: "", Upsert: specs, Hash: hash, Source: "test", Part: i, Parts: 3}}
	}
	index := uint64(0)
	apply := func(c replicated.Command) {
		t.Helper()
		index++
		if res := applyAt(t, f, 1, index, c); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	// A stage of another difference, left unfinished.
	apply(part("other", 0, jobstest.EveryMinute("x", "true")))
	apply(part(hash, 2, set[2]))
	apply(part(hash, 0, set[0]))
	apply(part(hash, 2, set[2]))
	if n := f.JobSetInfo().Count; n != 0 {
		t.Fatalf("after 2 of 3 parts (one twice): %d jobs; want the set unchanged", n)
	}
	apply(part(hash, 1, set[1]))
	got, _, _, _ := f.JobSet()
	if info := f.JobSetInfo(); info.Count != 3 || info.Hash != hash || jobs.HashSpecs(got) != hash {
		t.Errorf("after the last part: %d jobs of hash %s; want 3 of %s", info.Count, info.Hash, hash)
	}
	// Against the set now: a part of a difference against the old one.
	index++
	if res := applyAt(t, f, 1, index, part(hash, 0, set[0])); !errors.Is(res.Err, ErrJobsDiffBase) {
		t.Errorf("a part against the set before: %v, want %v", res.Err, ErrJobsDiffBase)
	}
}

// A part makes a new stage value and leaves the one before as it was,
// though it appends to the same arrays: a snapshot being written may hold
// the old value.
func TestFSM_SetJobsDiffPartLeavesTheOldStage(t *testing.T) {
	set := []jobs.Spec{jobstest.EveryMinute("a", "true"), jobstest.EveryMinute("b", "true"), jobstest.EveryMinute("c", "true")}
	hash := jobs.HashSpecs(set)
	f := NewFSM()
	for i := range 2 {
		c := replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &replicated.SetJobsDiffCmd{Upsert: set[i : i+1], Remove: []string{}, Hash: hash, Source: "test", Part: i, Parts: 3}}
		if i == 1 {
			// The value a snapshot of the state after part 0 holds.
			held := f.st.JobsStage
			upsert, got := slices.Clone(held.Upsert), slices.Clone(held.Got)
			defer func() {
				if !slices.EqualFunc(held.Upsert, upsert, func(a, b *jobs.Spec) bool { return a.Name == b.Name }) || !slices.Equal(held.Got, got) {
					t.Errorf("the stage after part 0 became %d jobs, parts %v; want %d, %v, as it was", len(held.Upsert), held.Got, len(upsert), got)
				}
				if f.st.JobsStage == held || len(f.st.JobsStage.Upsert) != 2 {
					t.Errorf("after part 1: stage %+v; want a new value with both parts' jobs", f.st.JobsStage)
				}
			}()
		}
		if res := applyAt(t, f, 1, uint64(i+1), c); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
}

// The parts applied so far are in a snapshot: a server that installs it
// between two parts finishes the difference as the others do, to the
// same set in the same order.
func TestFSM_SetJobsDiffPartsSurviveASnapshot(t *testing.T) {
	set := []jobs.Spec{jobstest.EveryMinute("a", "true"), jobstest.EveryMinute("b", "true"), jobstest.EveryMinute("c", "true")}
	hash := jobs.HashSpecs(set)
	part := func(i int) replicated.Command {
		return replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &replicated.SetJobsDiffCmd{Upsert: set[i : i+1], Hash: hash, Source: "test", Part: i, Parts: 3}}
	}
	old := NewFSM()
	applyAt(t, old, 1, 1, part(2)) // parts come in any order
	applyAt(t, old, 1, 2, part(0))
	var buf bytes.Buffer
	if _, err := old.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	if err := f.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*FSM{old, f} {
		if res := applyAt(t, s, 1, 3, part(1)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if info := f.JobSetInfo(); info.Count != 3 || info.Hash != hash {
		t.Errorf("the restored server after the last part: %d jobs of hash %s; want 3 of %s", info.Count, info.Hash, hash)
	}
	names := func(s *FSM) (n []string) {
		specs, _, _, _ := s.JobSet()
		for _, sp := range specs {
			n = append(n, sp.Name)
		}
		return n
	}
	if got, want := names(f), names(old); !slices.Equal(got, want) || !slices.Equal(want, []string{"c", "a", "b"}) {
		t.Errorf("jobs in the order %v on the restored server, %v on the other; want c, a, b on both (the parts' order)", got, want)
	}
}

// A difference that only changes jobs keeps the index of names it had
// (no sort of the set again) and counts what the specs say again: the
// index is the one a rebuild from the set makes.
func TestFSM_SetJobsDiffKeepsTheIndexOfNames(t *testing.T) {
	f := NewFSM()
	first := []jobs.Spec{jobstest.EveryMinute("c", "true"), jobstest.EveryMinute("a", "true"), jobstest.EveryMinute("b", "true")}
	applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: first, Source: "test", Hash: jobs.HashSpecs(first)}})
	byName := f.idx.byName
	paused := jobstest.EveryMinute("a", "false")
	paused.Paused = true
	next := []jobs.Spec{first[0], paused, first[2]}
	b := f.JobSetBase()
	upsert, remove := setdiff.Of(b.Jobs, b.ByName, next, nil)
	d := &replicated.SetJobsDiffCmd{Base: b.Hash, Upsert: upsert, Remove: remove, Hash: jobs.HashSpecs(next), Source: "test"}
	if res := applyAt(t, f, 1, 2, replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: d}); res.Err != nil {
		t.Fatal(res.Err)
	}
	kept := f.idx
	if reflect.ValueOf(kept.byName).UnsafePointer() != reflect.ValueOf(byName).UnsafePointer() {
		t.Error("a difference that only changed a job built the index of names again")
	}
	f.indexJobs(false)
	if !maps.Equal(kept.byName, f.idx.byName) || !slices.Equal(kept.sorted, f.idx.sorted) || kept.specPaused != 1 || f.idx.specPaused != 1 {
		t.Errorf("index kept %+v; rebuilt %+v", kept, f.idx)
	}
	// One removed and one added, as many jobs: rebuilt.
	next2 := []jobs.Spec{first[0], paused, jobstest.EveryMinute("d", "true")}
	b = f.JobSetBase()
	upsert, remove = setdiff.Of(b.Jobs, b.ByName, next2, nil)
	d = &replicated.SetJobsDiffCmd{Base: b.Hash, Upsert: upsert, Remove: remove, Hash: jobs.HashSpecs(next2), Source: "test"}
	if res := applyAt(t, f, 1, 3, replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: d}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if _, ok := f.idx.byName["d"]; !ok || len(f.idx.byName) != 3 {
		t.Errorf("after b removed and d added: %v", f.idx.byName)
	}
}

// A difference that sends at least an eighth of the set copies the jobs
// it keeps into an array of their own, so that the arrays of the sets
// before are not held for a few of their jobs; a smaller one shares them.
// Either way the set is the one DecideJobsDiff decides.
func TestFSM_SetJobsDiffCopiesWhatALargeOneKeeps(t *testing.T) {
	f := NewFSM()
	first := jobstest.Daily(16)
	applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: first, Source: "test", Hash: jobs.HashSpecs(first)}})
	for i, tc := range []struct {
		changed int
		copied  bool
	}{{1, false}, {2, true}, {16, false}} {
		b := f.JobSetBase()
		next := jobs.Values(b.Jobs)
		for k := range tc.changed {
			next[k].Schedules = []string{fmt.Sprintf("%d 1 * * *", i+1)}
		}
		upsert, remove := setdiff.Of(b.Jobs, b.ByName, next, nil)
		d := &replicated.SetJobsDiffCmd{Base: b.Hash, Upsert: upsert, Remove: remove, Hash: jobs.HashSpecs(next), Source: "test"}
		if res := applyAt(t, f, 1, uint64(i+2), replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: d}); res.Err != nil {
			t.Fatal(res.Err)
		}
		got := f.JobSetBase().Jobs
		if !reflect.DeepEqual(jobs.Values(got), next) {
			t.Fatalf("%d of %d changed: the set is %v; want %v", tc.changed, len(next), jobs.Values(got), next)
		}
		for k := tc.changed; k < len(got); k++ {
			if shared := got[k] == b.Jobs[k]; shared == tc.copied {
				t.Errorf("%d of %d changed: job %s kept at the same address %v; want %v", tc.changed, len(next), got[k].Name, shared, !tc.copied)
			}
		}
	}
}

// DecideJobsDiff makes what its definition makes, job by job: the set in
// its order, each job replaced or removed as the difference says, then
// the jobs new to it; over random differences of a set of 50.
func TestDecideJobsDiff_AsDefined(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	cur := make([]jobs.Spec, 50)
	byName := map[string]int{}
	for i := range cur {
		cur[i] = jobs.Spec{Name: fmt.Sprintf("j%02d", i), Shell: "1"}
		byName[cur[i].Name] = i
	}
	for range 300 {
		d := replicated.SetJobsDiffCmd{Base: "h"}
		for _, i := range r.Perm(len(cur))[:r.IntN(8)] {
			if r.IntN(2) == 0 {
				d.Remove = append(d.Remove, cur[i].Name)
			} else {
				d.Upsert = append(d.Upsert, jobs.Spec{Name: cur[i].Name, Shell: "2"})
			}
		}
		for k := range r.IntN(3) {
			d.Upsert = append(d.Upsert, jobs.Spec{Name: fmt.Sprintf("new%d", k), Shell: "3"})
		}
		var want []jobs.Spec
		for _, s := range cur {
			switch k := slices.IndexFunc(d.Upsert, func(u jobs.Spec) bool { return u.Name == s.Name }); {
			case slices.Contains(d.Remove, s.Name):
			case k >= 0:
				want = append(want, d.Upsert[k])
			default:
				want = append(want, s)
			}
		}
		for _, u := range d.Upsert {
			if _, ok := byName[u.Name]; !ok {
				want = append(want, u)
			}
		}
		got, err := DecideJobsDiff(jobs.Addrs(cur), byName, "h", d.Base, jobs.Addrs(d.Upsert), d.Remove)
		if err != nil || !reflect.DeepEqual(jobs.Values(got), want) {
			t.Fatalf("difference %+v: got %v (%v), want %v", d, jobs.Values(got), err, want)
		}
		// The jobs kept are the set's own, shared rather than copied.
		for _, s := range got {
			if i, ok := byName[s.Name]; ok && s.Shell == "1" && s != &cur[i] {
				t.Fatalf("difference %+v: job %s kept is a copy", d, s.Name)
			}
		}
	}
}

// A job a difference adds starts from the difference's time, and the
// jobs it keeps or changes keep theirs. A job of a restored snapshot
// that has no time yet (a snapshot written without one) gets one from
// the next difference, as it would from a whole set.
func TestFSM_SetJobsDiffNewJobsStartFromIt(t *testing.T) {
	t1, t2, t3 := t0.Add(time.Hour), t0.Add(2*time.Hour), t0.Add(3*time.Hour)
	diff := func(f *FSM, index uint64, at time.Time, next []jobs.Spec) {
		t.Helper()
		b := f.JobSetBase()
		upsert, remove := setdiff.Of(b.Jobs, b.ByName, next, nil)
		d := &replicated.SetJobsDiffCmd{Base: b.Hash, Upsert: upsert, Remove: remove, Hash: jobs.HashSpecs(next), Source: "test", At: at}
		if res := applyAt(t, f, 1, index, replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: d}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	times := func(f *FSM, names ...string) (out []time.Time) {
		for _, n := range names {
			at, _ := f.LastScheduled(n)
			out = append(out, at)
		}
		return out
	}
	old := NewFSM()
	first := []jobs.Spec{jobstest.EveryMinute("a", "true"), jobstest.EveryMinute("b", "true")}
	applyAt(t, old, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: first, Source: "test", At: t1, Hash: jobs.HashSpecs(first)}})
	diff(old, 2, t2, []jobs.Spec{first[0], jobstest.EveryMinute("b", "false"), jobstest.EveryMinute("c", "true")})
	if got := times(old, "a", "b", "c"); !slices.Equal(got, []time.Time{t1, t1, t2}) {
		t.Errorf("after the difference a, b and c start from %v; want %v", got, []time.Time{t1, t1, t2})
	}

	st := snapshotOf(t, old)
	delete(st["last_scheduled"].(map[string]any), "a")
	b := encodeJSON(t, st)
	// Restored by a replica that applied sets before, as Raft installs a
	// snapshot on a follower that fell behind.
	f := old
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.LastScheduled("a"); ok {
		t.Fatal("the restored snapshot still has a time for a")
	}
	diff(f, 3, t3, []jobs.Spec{first[0], jobstest.EveryMinute("b", "false"), jobstest.EveryMinute("c", "true"), jobstest.EveryMinute("d", "true")})
	if got := times(f, "a", "b", "c", "d"); !slices.Equal(got, []time.Time{t3, t1, t2, t3}) {
		t.Errorf("after the next difference a, b, c and d start from %v; want %v", got, []time.Time{t3, t1, t2, t3})
	}
}

package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func pageNames(p jobs.Page) []string {
	var out []string
	for _, e := range p.Jobs {
		out = append(out, e.Spec.Name)
	}
	return out
}

func TestFSM_FindJobs(t *testing.T) {
	f := NewFSM()
	specs := []jobs.Spec{
		{Name: "zeta", Schedules: []string{"@every 5s"}, Shell: "true", Target: map[string]string{"zone": "b"}},
		{Name: "alpha", Schedules: []string{"@every 5s"}, Shell: "true", Target: map[string]string{"zone": "a"}},
		{Name: "Report-Monthly", Schedules: []string{"@every 5s"}, Shell: "true", Paused: true},
		{Name: "beta", Schedules: []string{"@every 5s"}, Shell: "true"},
	}
	if res := applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "test"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	applyAt(t, f, 1, 2, grant("alpha", t0))
	applyAt(t, f, 1, 3, replicated.Command{Op: replicated.OpPause, Pause: &replicated.PauseCmd{Job: "beta", Paused: true, At: t0}})

	t.Run("pages in name order", func(t *testing.T) {
		p := f.FindJobs(jobs.Query{Limit: 2})
		if got, want := pageNames(p), []string{"Report-Monthly", "alpha"}; !slices.Equal(got, want) {
			t.Fatalf("first page = %v, want %v", got, want)
		}
		if !p.More || p.Matched != 4 || p.Total != 4 {
			t.Errorf("first page: more %v, matched %d, total %d; want true, 4, 4", p.More, p.Matched, p.Total)
		}
		p = f.FindJobs(jobs.Query{Limit: 2, After: "alpha"})
		if got, want := pageNames(p), []string{"beta", "zeta"}; !slices.Equal(got, want) || p.More {
			t.Fatalf("second page = %v (more %v), want %v and no more", got, p.More, want)
		}
		// A cursor need not name a job still in the set.
		if got, want := pageNames(f.FindJobs(jobs.Query{After: "b"})), []string{"beta", "zeta"}; !slices.Equal(got, want) {
			t.Errorf("after b = %v, want %v", got, want)
		}
	})
	t.Run("search", func(t *testing.T) {
		for _, tt := range []struct {
			q    jobs.Query
			want []string
		}{
			{jobs.Query{Text: "report"}, []string{"Report-Monthly"}},
			{jobs.Query{Text: "ZONE=A"}, []string{"alpha"}},
			{jobs.Query{Text: "zone="}, []string{"alpha", "zeta"}},
			{jobs.Query{State: jobs.Pending}, []string{"alpha"}},
			{jobs.Query{State: jobs.NeverRan}, []string{"Report-Monthly", "beta", "zeta"}},
			{jobs.Query{Paused: true}, []string{"Report-Monthly", "beta"}},
			{jobs.Query{Text: "a", State: jobs.NeverRan, Limit: 1}, []string{"beta"}},
		} {
			p := f.FindJobs(tt.q)
			if got := pageNames(p); !slices.Equal(got, tt.want) {
				t.Errorf("FindJobs(%+v) = %v, want %v", tt.q, got, tt.want)
			}
		}
		p := f.FindJobs(jobs.Query{Text: "a", State: jobs.NeverRan, Limit: 1})
		if !p.More || p.Matched != 2 {
			t.Errorf("a, never ran, limit 1: more %v, matched %d; want true, 2", p.More, p.Matched)
		}
	})
	t.Run("last run and pause", func(t *testing.T) {
		p := f.FindJobs(jobs.Query{Text: "alpha"})
		if len(p.Jobs) != 1 || p.Jobs[0].LastRun == nil || p.Jobs[0].LastRun.ID != jobs.RunID("alpha", t0) {
			t.Fatalf("alpha's last run = %+v", p.Jobs)
		}
		if info := f.JobSetInfo(); info.Paused != 2 || info.Count != 4 || info.First != "zeta" {
			t.Errorf("info = %+v, want 2 paused of 4, first zeta", info)
		}
	})
}

// A job's last run outlives the run itself: once the run is dropped to
// keep the state bounded, its summary answers, in the snapshot too.
func TestFSM_LastRunOutlivesTrim(t *testing.T) {
	f := withJobs(t, "rare", "busy")
	f.MaxRuns = 3
	applyAt(t, f, 1, 2, grant("rare", t0))
	c := replicated.Completion{Attempt: jobs.AttemptID(jobs.RunID("rare", t0), 1), State: jobs.Succeeded, EndedAt: t0.Add(time.Second)}
	applyAt(t, f, 1, 3, replicated.Command{Op: replicated.OpComplete, Complete: &c})
	for i := range 5 {
		at := t0.Add(time.Duration(i+1) * time.Minute)
		applyAt(t, f, 1, uint64(4+2*i), grant("busy", at))
		c := replicated.Completion{Attempt: jobs.AttemptID(jobs.RunID("busy", at), 1), State: jobs.Failed, EndedAt: at}
		applyAt(t, f, 1, uint64(5+2*i), replicated.Command{Op: replicated.OpComplete, Complete: &c})
	}
	if _, ok := f.Run(jobs.RunID("rare", t0)); ok {
		t.Fatal("rare's run was not dropped; the test needs it dropped")
	}
	for name, g := range map[string]*FSM{"live": f, "restored": snapshotRestored(t, f)} {
		r, ok := g.LastRun("rare")
		if !ok || r.ID != jobs.RunID("rare", t0) || r.State != jobs.Succeeded {
			t.Errorf("%s: rare's last run = %+v, %v; want its succeeded run", name, r, ok)
		}
		if a, ok := r.Latest(); !ok || a.Token != (jobs.Fence{Epoch: 1, Seq: 2}) {
			t.Errorf("%s: rare's last attempt = %+v", name, a)
		}
		if got := pageNames(g.FindJobs(jobs.Query{State: jobs.Succeeded})); !slices.Equal(got, []string{"rare"}) {
			t.Errorf("%s: jobs whose last run succeeded = %v, want [rare]", name, got)
		}
		if got, want := len(g.Runs(RunFilter{Job: "busy"})), 3; got != want {
			t.Errorf("%s: busy has %d runs kept, want %d", name, got, want)
		}
	}
}

// The lookups the leader makes per fire time cost the same whatever the
// set's size: compare one job's grant in a set of 100 and of 100,000.
func BenchmarkFSM_GrantInLargeSet(b *testing.B) {
	for _, n := range []int{100, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			f := NewFSM()
			specs := make([]jobs.Spec, n)
			for i := range specs {
				specs[i] = jobs.Spec{Name: fmt.Sprintf("job-%06d", i), Schedules: []string{"@every 1m"}, Shell: "true", Overlap: jobs.OverlapAllow}
			}
			b2, _ := EncodeEntry(replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "bench"}})
			f.Apply(rawLog(1, 1, b2))
			b.ResetTimer()
			for i := range b.N {
				at := t0.Add(time.Duration(i) * time.Second)
				e, _ := EncodeEntry(grant(specs[i%n].Name, at))
				if res := f.Apply(rawLog(1, uint64(i+2), e)).(ApplyResult); res.Err != nil {
					b.Fatal(res.Err)
				}
			}
		})
	}
}

func rawLog(term, index uint64, data []byte) *raft.Log {
	return &raft.Log{Term: term, Index: index, Type: raft.LogCommand, Data: data}
}

// A snapshot is one JSON object, its job set written last (outside the
// lock); an empty set is written as no field at all.
func TestFSM_SnapshotWritesJobsLast(t *testing.T) {
	for _, names := range [][]string{nil, {"a", "b"}} {
		f := withJobs(t, names...)
		b := snapshotBytes(t, f)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%d jobs: snapshot is not one JSON object: %v\n%.200s", len(names), err, b)
		}
		if got := bytes.Count(b, []byte(`"jobs":`)); got != min(len(names), 1) {
			t.Errorf("%d jobs: \"jobs\" written %d times", len(names), got)
		}
		if got := snapshotRestored(t, f).JobSetInfo(); got.Count != len(names) || got.Hash != f.JobSetInfo().Hash {
			t.Errorf("%d jobs: restored %+v, want %+v", len(names), got, f.JobSetInfo())
		}
	}
}

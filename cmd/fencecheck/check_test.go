package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

var t0 = time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)

// everySecond is a job that fires every second.
func everySecond(t *testing.T) jobs.Spec {
	t.Helper()
	s := jobs.Spec{Name: "tick", Schedules: []string{"* * * * * *"}, Output: "ticks/x"}
	s.Normalize()
	return s
}

// mkRun returns a finished run of tick at second sec with one attempt per
// token.
// ofJob makes r a run of job, with output key output.
func ofJob(r jobs.Run, job, output string) jobs.Run {
	r.ID, r.Job, r.Output = jobs.RunID(job, r.ScheduledAt), job, output
	for i := range r.Attempts {
		r.Attempts[i].ID = jobs.AttemptID(r.ID, i+1)
		r.Attempts[i].State = jobs.Failed // no store outcome to account for
	}
	r.State = jobs.Failed
	return r
}

func mkRun(sec int, state jobs.State, tokens ...jobs.Fence) jobs.Run {
	at := t0.Add(time.Duration(sec) * time.Second)
	r := jobs.Run{ID: jobs.RunID("tick", at), Job: "tick", ScheduledAt: at, State: state, Trigger: "schedule"}
	for i, tok := range tokens {
		st := jobs.Lost
		if i == len(tokens)-1 {
			st = state
		}
		r.Attempts = append(r.Attempts, jobs.Attempt{
			ID: jobs.AttemptID(r.ID, i+1), Number: i + 1, Token: tok, State: st,
			GrantedAt: at.Add(time.Duration(i) * 100 * time.Millisecond),
		})
	}
	return r
}

// failures runs every check and returns the failing ones' details.
func failures(o *Observation) map[string][]string {
	out := map[string][]string{}
	for _, r := range Check(o, CheckOptions{}) {
		if !r.OK() {
			out[r.Name] = r.Details
		}
	}
	return out
}

func TestCheck_Schedule(t *testing.T) {
	base := func() *Observation {
		o := NewObservation()
		o.Jobs = []jobs.Spec{everySecond(t)}
		o.Window = Window{From: t0, To: t0.Add(5 * time.Second)}
		return o
	}
	full := func(o *Observation) {
		o.AddRuns("n1", t0, []jobs.Run{mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}), mkRun(2, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 7})})
		o.AddSkips([]jobs.SkipRange{{Job: "tick", From: t0.Add(3 * time.Second), To: t0.Add(4 * time.Second), Count: 2, Reason: "missed (misfire: skip)"}})
		o.AddRuns("n1", t0, []jobs.Run{{ID: jobs.RunID("tick", t0.Add(5*time.Second)), Job: "tick", ScheduledAt: t0.Add(5 * time.Second), State: jobs.Skipped, Reason: "previous run still open"}})
	}
	t.Run("accounted", func(t *testing.T) {
		o := base()
		full(o)
		if f := failures(o); len(f) > 0 {
			t.Fatalf("failures: %v", f)
		}
	})
	for _, tc := range []struct {
		name, check, want string
		change            func(o *Observation)
	}{
		{"missing time", CheckAccounted, "no run and no recorded skip", func(o *Observation) {
			delete(o.Runs, jobs.RunID("tick", t0.Add(2*time.Second)))
		}},
		{"granted and skipped", CheckAccounted, "also skipped", func(o *Observation) {
			o.AddSkips([]jobs.SkipRange{{Job: "tick", From: t0.Add(2 * time.Second), To: t0.Add(2 * time.Second), Count: 1, Reason: "x"}})
		}},
		{"skip without reason", CheckAccounted, "without a reason", func(o *Observation) {
			o.Skips[0].Reason = ""
		}},
		{"skip count", CheckAccounted, "says 3 fire times, the schedule has 2", func(o *Observation) {
			o.Skips[0].Count = 3
		}},
		{"open run", CheckTerminal, "still running", func(o *Observation) {
			r := mkRun(1, jobs.Running, jobs.Fence{Epoch: 2, Seq: 5})
			o.Runs[r.ID] = r
		}},
		{"started before its fire time", CheckNotEarly, "before the fire time", func(o *Observation) {
			r := o.Runs[jobs.RunID("tick", t0.Add(time.Second))]
			r.Attempts[0].StartedAt = r.ScheduledAt.Add(-20 * time.Millisecond)
			o.Runs[r.ID] = r
		}},
		{"never started, but started", CheckRunState, "taken as never started", func(o *Observation) {
			r := o.Runs[jobs.RunID("tick", t0.Add(time.Second))]
			r.Attempts[0].NeverStarted, r.Attempts[0].StartedAt = true, r.ScheduledAt
			o.Runs[r.ID] = r
		}},
		{"run state", CheckRunState, "its newest attempt", func(o *Observation) {
			r := o.Runs[jobs.RunID("tick", t0.Add(time.Second))]
			r.State = jobs.Failed
			o.Runs[r.ID] = r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			full(o)
			tc.change(o)
			f := failures(o)
			if !strings.Contains(strings.Join(f[tc.check], "\n"), tc.want) {
				t.Fatalf("%s: %v; want a violation saying %q", tc.check, f, tc.want)
			}
		})
	}
}

func TestCheck_Tokens(t *testing.T) {
	elected := func(epoch, index uint64) jobs.Event {
		return jobs.Event{Kind: jobs.EventElected, Epoch: epoch, Index: index}
	}
	for _, tc := range []struct {
		name, check, want string
		runs              []jobs.Run
		events            []jobs.Event
		sightings         map[string][]jobs.Fence
	}{
		{name: "ordered", runs: []jobs.Run{
			mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}),
			mkRun(3, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 9}, jobs.Fence{Epoch: 3, Seq: 12}),
		}, events: []jobs.Event{elected(2, 3), elected(3, 11)}},
		{name: "epoch back by index", check: CheckTokenOrder, want: "the epoch went back", runs: []jobs.Run{
			mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 3, Seq: 5}),
			mkRun(3, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 9}),
		}},
		// A cluster restarted on empty disks mints small tokens again.
		{name: "restart from scratch", check: CheckTokenOrder, want: "older than", runs: []jobs.Run{
			mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 4, Seq: 50}),
			mkRun(5, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 3}),
		}},
		{name: "same index", check: CheckTokenOrder, want: "share log index", runs: []jobs.Run{
			mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}),
			mkRun(3, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}),
		}},
		// A batch grant: one entry, one token, runs of jobs whose keys
		// cannot meet.
		{name: "batch of jobs apart", runs: []jobs.Run{
			ofJob(mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}), "a", "a/out"),
			ofJob(mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}), "b", "b/out"),
		}},
		{name: "batch of jobs whose keys meet", check: CheckTokenOrder, want: "their keys meet", runs: []jobs.Run{
			ofJob(mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}), "a", "shared/out"),
			ofJob(mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}), "b", "shared/out"),
		}},
		{name: "grant outside its epoch", check: CheckTokenOrder, want: "last election entry", runs: []jobs.Run{
			mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 12}),
		}, events: []jobs.Event{elected(2, 3), elected(3, 11)}},
		{name: "granted twice", check: CheckUniqueGrant, want: "seen with 2 tokens", runs: []jobs.Run{
			mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}),
		}, sightings: map[string][]jobs.Fence{jobs.AttemptID(jobs.RunID("tick", t0.Add(time.Second)), 1): {{Epoch: 2, Seq: 40}}}},
		{name: "granted twice in the trail", check: CheckUniqueGrant, want: "granted twice", events: []jobs.Event{
			{Kind: jobs.EventGranted, Attempt: "tick@x.1", Index: 4}, {Kind: jobs.EventGranted, Attempt: "tick@x.1", Index: 9},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewObservation()
			o.AddRuns("n1", t0, tc.runs)
			for id, toks := range tc.sightings {
				for _, tok := range toks {
					o.sight(id, Sighting{Token: tok, Node: "n2"})
				}
			}
			for i := range tc.events {
				tc.events[i].Seq = uint64(i + 1)
			}
			o.AddEvents(tc.events)
			f := failures(o)
			if tc.check == "" {
				if len(f) > 0 {
					t.Fatalf("failures: %v", f)
				}
				return
			}
			if !strings.Contains(strings.Join(f[tc.check], "\n"), tc.want) {
				t.Fatalf("%s: %v; want a violation saying %q", tc.check, f, tc.want)
			}
		})
	}
}

func TestCheck_Monotonic(t *testing.T) {
	meta := func(key string, g uint64, v uint64) fencedstore.Meta {
		return fencedstore.Meta{Key: key, Greatest: fencedstore.Token{Epoch: 2, Seq: g}, Version: v}
	}
	t.Run("store went back after a restart", func(t *testing.T) {
		o := NewObservation()
		o.AddStoreListing(t0, []fencedstore.Meta{meta("a", 9, 3), meta("b", 4, 1)})
		o.AddStoreListing(t0.Add(time.Second), []fencedstore.Meta{meta("a", 9, 3), meta("b", 4, 1)})
		o.AddStoreListing(t0.Add(2*time.Second), []fencedstore.Meta{meta("a", 7, 3)})
		o.AddStoreListing(t0.Add(3*time.Second), []fencedstore.Meta{meta("a", 7, 3)})
		if n := len(o.StoreSeries["a"]); n != 2 {
			t.Errorf("a's series has %d entries, want only the 2 changes", n)
		}
		d := strings.Join(failures(o)[CheckStoreMonotonic], "\n")
		if !strings.Contains(d, "a: greatest 2.7") || !strings.Contains(d, "b: listed at") || strings.Count(d, "b: listed at") != 1 {
			t.Fatalf("violations %q; want a's token going back and b disappearing", d)
		}
	})
	t.Run("epoch within one process", func(t *testing.T) {
		o := NewObservation()
		o.EpochSamples = []EpochSample{
			{At: t0, Node: "n1", Life: 1, Epoch: 5},
			{At: t0.Add(time.Second), Node: "n1", Life: 2, Epoch: 3}, // restarted, replaying: fine
			{At: t0.Add(2 * time.Second), Node: "n1", Life: 2, Epoch: 6},
			{At: t0.Add(3 * time.Second), Node: "n1", Life: 2, Epoch: 4},
		}
		f := failures(o)[CheckEpochMonotonic]
		if len(f) != 1 || !strings.Contains(f[0], "epoch 4") {
			t.Fatalf("violations %q; want exactly the fall from 6 to 4", f)
		}
	})
}

func TestCheck_StoreVsRuns(t *testing.T) {
	tok := jobs.Fence{Epoch: 2, Seq: 5}
	r := mkRun(1, jobs.Succeeded, tok)
	r.Output = "ticks/x"
	r.Attempts[0].StoreOutcome, r.Attempts[0].StoreVersion = "applied", 1
	id := r.Attempts[0].ID
	dec := fencedstore.Decision{Outcome: fencedstore.Applied, Token: tok, Attempt: id, Version: 1, Hash: "h"}
	for _, tc := range []struct {
		name, want string
		hist       map[string][]fencedstore.Decision
	}{
		{"agree", "", map[string][]fencedstore.Decision{"ticks/x": {dec}}},
		{"claimed but never applied", "the store has no such applied write", map[string][]fencedstore.Decision{"ticks/x": {{Outcome: fencedstore.Established, Token: tok, Attempt: id}}}},
		{"wrong token", "carries token 2.6", map[string][]fencedstore.Decision{"ticks/x": {dec, {Outcome: fencedstore.Established, Token: fencedstore.Token{Epoch: 2, Seq: 6}, Attempt: id, Version: 1}}}},
		{"outside its output", "whose run's output", map[string][]fencedstore.Decision{"ticks/x": {dec}, "other": {{Outcome: fencedstore.Established, Token: tok, Attempt: id}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewObservation()
			o.AddRuns("n1", t0, []jobs.Run{r})
			o.Histories = tc.hist
			f := strings.Join(failures(o)[CheckStoreVsRuns], "\n")
			if tc.want == "" && f != "" || !strings.Contains(f, tc.want) {
				t.Fatalf("violations %q; want %q", f, tc.want)
			}
		})
	}
}

// A lagging follower's older view of a run never replaces a newer one.
func TestObservation_AddRunsKeepsTheMostAdvanced(t *testing.T) {
	o := NewObservation()
	newer := mkRun(1, jobs.Succeeded, jobs.Fence{Epoch: 2, Seq: 5}, jobs.Fence{Epoch: 2, Seq: 8})
	older := mkRun(1, jobs.Running, jobs.Fence{Epoch: 2, Seq: 5})
	older.Attempts[0].State = jobs.Running
	o.AddRuns("n1", t0, []jobs.Run{newer})
	o.AddRuns("n2", t0, []jobs.Run{older})
	if got := o.Runs[newer.ID]; len(got.Attempts) != 2 || got.State != jobs.Succeeded {
		t.Fatalf("run %+v, want the newer view", got)
	}
	o.AddEvents([]jobs.Event{{Seq: 3, Index: 10}, {Seq: 4, Index: 11}, {Seq: 7, Index: 20}})
	if got, want := o.EventGaps, 4; got != want {
		t.Errorf("gaps %d, want %d", got, want)
	}
	if !o.trailGap(12, 19) || o.trailGap(10, 11) {
		t.Errorf("gaps %v", o.Gaps)
	}
}

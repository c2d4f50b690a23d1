package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestDecideGrant(t *testing.T) {
	at := t0.Add(10 * time.Second)
	open := []jobs.Run{{ID: "j@1"}, {ID: "j@2"}}
	existing := &jobs.Run{ID: jobs.RunID("j", at)}
	cases := []struct {
		name     string
		in       GrantInput
		verdict  GrantVerdict
		err      error
		reason   string // a substring of Reason
		replace  []string
		overrode []string
	}{
		{"unknown job", GrantInput{Known: false, Overlap: jobs.OverlapAllow}, GrantRefused, jobs.ErrUnknownJob, "", nil, nil},
		{"duplicate", GrantInput{Known: true, Existing: existing, Overlap: jobs.OverlapAllow}, GrantRefused, jobs.ErrDuplicateRun, "", nil, nil},
		{"duplicate even if forced", GrantInput{Known: true, Existing: existing, Force: true}, GrantRefused, jobs.ErrDuplicateRun, "", nil, nil},
		{"at the horizon (trimmed)", GrantInput{Known: true, Horizon: at}, GrantRefused, jobs.ErrDuplicateRun, "", nil, nil},
		{"before the horizon", GrantInput{Known: true, Horizon: at.Add(time.Second)}, GrantRefused, jobs.ErrDuplicateRun, "", nil, nil},
		{"after the horizon", GrantInput{Known: true, Horizon: at.Add(-time.Second)}, GrantGranted, nil, "", nil, nil},
		{"nothing open, forbid", GrantInput{Known: true, Overlap: jobs.OverlapForbid}, GrantGranted, nil, "", nil, nil},
		{"open, forbid", GrantInput{Known: true, Overlap: jobs.OverlapForbid, Open: open}, GrantSkipped, nil, "previous run j@2 still open (overlap: forbid)", nil, nil},
		{"open, no policy is forbid", GrantInput{Known: true, Open: open}, GrantSkipped, nil, "overlap: forbid", nil, nil},
		{"open, forbid, manual", GrantInput{Known: true, Overlap: jobs.OverlapForbid, Open: open, Trigger: "manual"}, GrantSkipped, nil, "trigger -force overrides it", nil, nil},
		{"open, forbid, forced", GrantInput{Known: true, Overlap: jobs.OverlapForbid, Open: open, Force: true}, GrantGranted, nil, "", nil, []string{"j@1", "j@2"}},
		{"open, allow", GrantInput{Known: true, Overlap: jobs.OverlapAllow, Open: open}, GrantGranted, nil, "", nil, nil},
		{"open, replace", GrantInput{Known: true, Overlap: jobs.OverlapReplace, Open: open}, GrantGranted, nil, "", []string{"j@1", "j@2"}, nil},
		{"open, replace, forced: nothing cancelled", GrantInput{Known: true, Overlap: jobs.OverlapReplace, Open: open, Force: true}, GrantGranted, nil, "", nil, []string{"j@1", "j@2"}},
		{"leader's skip", GrantInput{Known: true, Overlap: jobs.OverlapReplace, Open: open, Skip: "no alive worker"}, GrantSkipped, nil, "no alive worker", nil, nil},
		{"version 1: the leader decided", GrantInput{Known: true, Overlap: jobs.OverlapForbid, Open: open, Version: 1}, GrantGranted, nil, "", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Job, in.ScheduledAt = "j", at
			if in.Version == 0 {
				in.Version = 2
			}
			d := DecideGrant(in)
			if d.Verdict != tc.verdict {
				t.Errorf("verdict = %d, want %d (%+v)", d.Verdict, tc.verdict, d)
			}
			if tc.err != nil && !errors.Is(d.Err, tc.err) || tc.err == nil && d.Err != nil {
				t.Errorf("err = %v, want %v", d.Err, tc.err)
			}
			if !strings.Contains(d.Reason, tc.reason) || (tc.reason == "" && d.Reason != "") {
				t.Errorf("reason = %q, want %q", d.Reason, tc.reason)
			}
			if fmt.Sprint(d.Replace) != fmt.Sprint(tc.replace) || fmt.Sprint(d.Overrode) != fmt.Sprint(tc.overrode) {
				t.Errorf("replace %v, overrode %v; want %v, %v", d.Replace, d.Overrode, tc.replace, tc.overrode)
			}
		})
	}
}

func withSpecs(t *testing.T, specs ...jobs.Spec) *FSM {
	t.Helper()
	f := NewFSM()
	if res := applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "test"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	return f
}

func overlapSpec(overlap string) jobs.Spec {
	return jobs.Spec{Name: "j", Schedules: []string{"@every 1s"}, Shell: "sleep 1.5", Overlap: overlap, Retries: 1}
}

// FSM.Apply decides overlap from the replicated state: two grants
// proposed while nothing was open cannot both run under forbid, replace
// cancels and grants in one entry, force overrides and is audited, and a
// version 1 entry keeps the rules it was written under.
func TestFSM_GrantDecidesOverlap(t *testing.T) {
	t.Run("forbid records a skip with its reason", func(t *testing.T) {
		f := withSpecs(t, overlapSpec(jobs.OverlapForbid))
		first := applyAt(t, f, 2, 10, grant("j", t0))
		second := applyAt(t, f, 2, 11, grant("j", t0.Add(time.Second)))
		if first.Err != nil || first.Run.State != jobs.Pending {
			t.Fatalf("first grant: %v, %s", first.Err, first.Run.State)
		}
		if second.Err != nil || second.Run.State != jobs.Skipped || second.Run.Reason != "previous run "+first.Run.ID+" still open (overlap: forbid)" {
			t.Fatalf("second grant: %v, %s (%q); want skipped naming the open run", second.Err, second.Run.State, second.Run.Reason)
		}
		if got := len(f.OpenRuns("j")); got != 1 {
			t.Errorf("%d open runs, want 1", got)
		}
		if n := f.Counters()[CounterSkipped]; n != 1 {
			t.Errorf("skipped = %d, want 1", n)
		}
		// The skipped time stays handled: granting it again is a duplicate.
		if res := applyAt(t, f, 2, 12, grant("j", t0.Add(time.Second))); !errors.Is(res.Err, jobs.ErrDuplicateRun) || res.Run.State != jobs.Skipped {
			t.Errorf("re-grant of a skipped time: %v, %s; want ErrDuplicateRun with the skipped run", res.Err, res.Run.State)
		}
		// A run waiting for its retry is still open.
		c := replicated.Completion{Attempt: first.Run.Attempts[0].ID, State: jobs.Failed, EndedAt: t0.Add(time.Second)}
		applyAt(t, f, 2, 13, replicated.Command{Op: replicated.OpComplete, Complete: &c})
		if res := applyAt(t, f, 2, 14, grant("j", t0.Add(2*time.Second))); res.Run.State != jobs.Skipped {
			t.Errorf("grant while a run awaits its retry: %s, want skipped", res.Run.State)
		}
		// Once it finished, the next grant runs.
		applyAt(t, f, 2, 15, replicated.Command{Op: replicated.OpRetry, Retry: &replicated.RetryCmd{Run: first.Run.ID, After: 1, Worker: "w1", At: t0}})
		c = replicated.Completion{Attempt: jobs.AttemptID(first.Run.ID, 2), State: jobs.Succeeded, EndedAt: t0.Add(2 * time.Second)}
		applyAt(t, f, 2, 16, replicated.Command{Op: replicated.OpComplete, Complete: &c})
		if res := applyAt(t, f, 2, 17, grant("j", t0.Add(3*time.Second))); res.Err != nil || res.Run.State != jobs.Pending {
			t.Errorf("grant after the open run ended: %v, %s; want granted", res.Err, res.Run.State)
		}
	})
	t.Run("replace cancels the open attempt in the same entry", func(t *testing.T) {
		f := withSpecs(t, overlapSpec(jobs.OverlapReplace))
		feed := f.Changes()
		defer feed.Close()
		first := applyAt(t, f, 2, 10, grant("j", t0))
		applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpStart, Start: &replicated.StartCmd{Attempt: first.Run.Attempts[0].ID, At: t0}})
		feed.Take()
		second := applyAt(t, f, 2, 12, grant("j", t0.Add(time.Second)))
		if second.Err != nil || second.Run.State != jobs.Pending {
			t.Fatalf("replacing grant: %v, %s", second.Err, second.Run.State)
		}
		old, _ := f.Run(first.Run.ID)
		a := old.Attempts[0]
		if old.State != jobs.Cancelled || a.State != jobs.Cancelled || !strings.Contains(a.Error, "overlap: replace") {
			t.Errorf("replaced run %s, attempt %s (%q); want cancelled", old.State, a.State, a.Error)
		}
		for _, e := range f.Events(0, 0) {
			if (e.Kind == jobs.EventCancelled || e.Kind == jobs.EventGranted && e.Run == second.Run.ID) && e.Index != 12 {
				t.Errorf("event %s of %s recorded by entry %d, want 12: one entry", e.Kind, e.Run, e.Index)
			}
		}
		if got := feed.Take(); len(got) != 1 || got[0] != (Change{Kind: ChangeEnded, Index: 12, Run: first.Run.ID, Attempt: a.ID}) {
			t.Errorf("changes = %+v, want the replaced attempt ended", got)
		}
		if got := len(f.OpenRuns("j")); got != 1 {
			t.Errorf("%d open runs, want 1", got)
		}
		// The replaced worker's late report does not revive it.
		c := replicated.Completion{Attempt: a.ID, State: jobs.Succeeded, EndedAt: t0.Add(2 * time.Second)}
		if res := applyAt(t, f, 2, 13, replicated.Command{Op: replicated.OpComplete, Complete: &c}); res.Run.State != jobs.Cancelled {
			t.Errorf("late completion of the replaced attempt: run %s, want cancelled", res.Run.State)
		}
	})
	t.Run("replace refused for its token cancels nothing", func(t *testing.T) {
		f := withSpecs(t, overlapSpec(jobs.OverlapReplace))
		first := applyAt(t, f, 2, 10, grant("j", t0))
		if res := applyAt(t, f, 1<<63, 11, grant("j", t0.Add(time.Second))); !errors.Is(res.Err, jobs.ErrTokenRange) {
			t.Fatalf("grant at term 2^63: %v, want ErrTokenRange", res.Err)
		}
		if r, _ := f.Run(first.Run.ID); r.State != jobs.Pending {
			t.Errorf("open run after a refused replacing grant: %s, want still pending", r.State)
		}
	})
	t.Run("allow grants beside", func(t *testing.T) {
		f := withSpecs(t, overlapSpec(jobs.OverlapAllow))
		applyAt(t, f, 2, 10, grant("j", t0))
		applyAt(t, f, 2, 11, grant("j", t0.Add(time.Second)))
		if got := len(f.OpenRuns("j")); got != 2 {
			t.Errorf("%d open runs, want 2", got)
		}
	})
	t.Run("force overrides forbid and is audited", func(t *testing.T) {
		f := withSpecs(t, overlapSpec(jobs.OverlapForbid))
		first := applyAt(t, f, 2, 10, grant("j", t0))
		g := grant("j", t0.Add(time.Second))
		g.Grant.Trigger, g.Grant.Force = "manual", true
		res := applyAt(t, f, 2, 11, g)
		if res.Err != nil || res.Run.State != jobs.Pending || !res.Run.Forced {
			t.Fatalf("forced grant: %v, %s, forced %v; want granted", res.Err, res.Run.State, res.Run.Forced)
		}
		var forced []jobs.Event
		for _, e := range f.Events(0, 0) {
			if e.Kind == jobs.EventForced {
				forced = append(forced, e)
			}
		}
		if len(forced) != 1 || forced[0].Run != res.Run.ID || !strings.Contains(forced[0].Detail, first.Run.ID) {
			t.Errorf("forced events = %+v, want one naming the run it runs beside", forced)
		}
	})
	t.Run("version 1 grant: the leader decided", func(t *testing.T) {
		f := withSpecs(t, overlapSpec(jobs.OverlapForbid))
		applyV1(t, f, 2, 10, grant("j", t0))
		if res := applyV1(t, f, 2, 11, grant("j", t0.Add(time.Second))); res.Err != nil || res.Run.State != jobs.Pending {
			t.Errorf("version 1 grant beside an open run: %v, %s; want granted as its leader decided", res.Err, res.Run.State)
		}
	})
}

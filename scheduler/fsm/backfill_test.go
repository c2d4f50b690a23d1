package fsm

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func backfillCmdOf(job string, maxRunning int, times ...time.Time) replicated.Command {
	return replicated.Command{Op: replicated.OpBackfill, Backfill: &replicated.BackfillCmd{Job: job, Times: times, From: times[0], To: times[len(times)-1].Add(time.Second), MaxRunning: maxRunning, At: t0}}
}

func backfillGrant(job string, at time.Time) replicated.Command {
	return replicated.Command{Op: replicated.OpGrant, Grant: &replicated.GrantCmd{Job: job, ScheduledAt: at, Worker: "w1", Trigger: TriggerBackfill, At: at}}
}

func TestBackfillRoom(t *testing.T) {
	bf := jobs.Run{Trigger: TriggerBackfill, State: jobs.Running}
	sched := jobs.Run{Trigger: "schedule", State: jobs.Running}
	for _, tc := range []struct {
		name       string
		overlap    string
		open       []jobs.Run
		maxRunning int
		want       int
	}{
		{"allow, nothing open", jobs.OverlapAllow, nil, 3, 3},
		{"allow, two backfill runs open", jobs.OverlapAllow, []jobs.Run{bf, bf}, 3, 1},
		{"allow, full", jobs.OverlapAllow, []jobs.Run{bf, bf, bf}, 3, 0},
		{"allow, a scheduled run does not count", jobs.OverlapAllow, []jobs.Run{sched}, 1, 1},
		{"forbid, nothing open", jobs.OverlapForbid, nil, 3, 3},
		{"forbid, a scheduled run open", jobs.OverlapForbid, []jobs.Run{sched}, 3, 0},
		{"replace, a backfill run open", jobs.OverlapReplace, []jobs.Run{bf}, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BackfillRoom(tc.overlap, tc.open, tc.maxRunning); got != tc.want {
				t.Errorf("BackfillRoom = %d, want %d", got, tc.want)
			}
		})
	}
}

// Apply decides a backfill from the replicated state: times with a run
// and times at or before the retained horizon are not queued; a backfill
// grant is admitted only for a queued time and only while the job has
// room (throttled in the log, so whichever leader proposes, max_running
// holds); the queue survives a snapshot; a second backfill of the same
// range queues nothing.
func TestFSM_Backfill(t *testing.T) {
	spec := jobs.Spec{Name: "j", Schedules: []string{"@every 5s"}, Shell: "true", Overlap: jobs.OverlapAllow}
	f := withSpecs(t, spec)
	ts := []time.Time{t0, t0.Add(5 * time.Second), t0.Add(10 * time.Second), t0.Add(15 * time.Second)}
	// t0+5s already ran on schedule.
	if res := applyAt(t, f, 2, 10, grant("j", ts[1])); res.Err != nil {
		t.Fatal(res.Err)
	}
	res := applyAt(t, f, 2, 11, backfillCmdOf("j", 2, ts...))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	b := res.Backfill
	if want := []time.Time{ts[0], ts[2], ts[3]}; !slices.EqualFunc(b.Create, want, time.Time.Equal) || len(b.Existing) != 1 || b.Existing[0].Run != jobs.RunID("j", ts[1]) || b.Pending != 3 {
		t.Fatalf("backfill = %+v, want create %v, existing %s, 3 pending", b, want, jobs.RunID("j", ts[1]))
	}

	// A time not queued is refused; two grants fill max_running 2; the
	// third waits, recording nothing.
	if res := applyAt(t, f, 2, 12, backfillGrant("j", t0.Add(time.Hour))); res.Err == nil {
		t.Errorf("backfill grant of a time never queued: granted %+v", res.Run)
	}
	for i, at := range []time.Time{ts[0], ts[2]} {
		if res := applyAt(t, f, 2, uint64(13+i), backfillGrant("j", at)); res.Err != nil || res.Run.Trigger != TriggerBackfill {
			t.Fatalf("backfill grant %s: %+v, %v", at, res.Run, res.Err)
		}
	}
	if got, want := f.BackfillDue(), map[string][]time.Time{}; len(got) != len(want) {
		t.Errorf("BackfillDue with max_running open = %v, want nothing", got)
	}
	if res := applyAt(t, f, 2, 15, backfillGrant("j", ts[3])); !errors.Is(res.Err, ErrBackfillWait) {
		t.Errorf("third backfill grant with 2 open, max_running 2: %+v, %v; want ErrBackfillWait", res.Run, res.Err)
	}
	if got := f.backfillPending("j"); got != 1 {
		t.Errorf("pending = %d, want 1 (the throttled time stays queued)", got)
	}

	// The queue survives a snapshot; once a run ends there is room.
	g := snapshotRestored(t, f)
	first := jobs.AttemptID(jobs.RunID("j", ts[0]), 1)
	applyAt(t, g, 2, 16, replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: first, State: jobs.Succeeded, EndedAt: t0}})
	if got := g.BackfillDue()["j"]; !slices.EqualFunc(got, ts[3:], time.Time.Equal) {
		t.Errorf("after a snapshot and a completion, due = %v, want %v", got, ts[3:])
	}
	if res := applyAt(t, g, 2, 17, backfillGrant("j", ts[3])); res.Err != nil {
		t.Fatalf("grant after room: %v", res.Err)
	}
	if got := g.backfillPending("j"); got != 0 {
		t.Errorf("pending = %d, want 0", got)
	}

	// The same range again: nothing to create.
	res = applyAt(t, g, 2, 18, backfillCmdOf("j", 2, ts...))
	if res.Err != nil || len(res.Backfill.Create) != 0 || len(res.Backfill.Existing) != 4 {
		t.Errorf("second backfill = %+v, %v; want nothing created, 4 existing", res.Backfill, res.Err)
	}
}

// Runs dropped to keep the state bounded leave a horizon: a backfill
// refuses every time at or before it (whether it ran cannot be told), so
// trimming never lets a backfill create a second run for a time.
func TestFSM_BackfillRefusesTimesAtOrBeforeTheHorizon(t *testing.T) {
	f := withJobs(t, "report")
	f.MaxRuns = 2
	idx := uint64(10)
	var times []time.Time
	for i := range 4 {
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		times = append(times, at)
		g := applyAt(t, f, 2, idx, grant("report", at))
		c := replicated.Completion{Attempt: g.Run.Attempts[0].ID, State: jobs.Succeeded, EndedAt: at}
		applyAt(t, f, 2, idx+1, replicated.Command{Op: replicated.OpComplete, Complete: &c})
		idx += 2
	}
	// The first two runs were dropped; a backfill of them and a new time.
	later := t0.Add(time.Minute)
	res := applyAt(t, f, 2, idx, backfillCmdOf("report", 1, append(times, later)...))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	b := res.Backfill
	if !slices.EqualFunc(b.BeforeHorizon, times[:2], time.Time.Equal) || len(b.Existing) != 2 || !slices.EqualFunc(b.Create, []time.Time{later}, time.Time.Equal) || !b.Horizon.Equal(times[1]) {
		t.Errorf("backfill = %+v, want before horizon %v, 2 existing, create %s", b, times[:2], later)
	}
}

// An unknown job's backfill is refused; a job removed from the set loses
// its queue.
func TestFSM_BackfillOfUnknownOrRemovedJob(t *testing.T) {
	f := withJobs(t, "a", "b")
	if res := applyAt(t, f, 2, 10, backfillCmdOf("nope", 1, t0)); !errors.Is(res.Err, jobs.ErrUnknownJob) {
		t.Errorf("backfill of an unknown job: %v, want ErrUnknownJob", res.Err)
	}
	applyAt(t, f, 2, 11, backfillCmdOf("b", 1, t0))
	if got := f.backfillPending("b"); got != 1 {
		t.Fatalf("pending = %d, want 1", got)
	}
	// A second request merges: a time already queued is said to be.
	res := applyAt(t, f, 2, 12, backfillCmdOf("b", 1, t0, t0.Add(5*time.Second)))
	if b := res.Backfill; res.Err != nil || len(b.Queued) != 1 || !b.Queued[0].Equal(t0) || len(b.Create) != 1 || b.Pending != 2 {
		t.Errorf("second backfill = %+v, %v; want t0 already queued, one created, 2 pending", res.Backfill, res.Err)
	}
	applyAt(t, f, 2, 13, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{{Name: "a", Schedules: []string{"@every 5s"}, Shell: "true"}}, Source: "test"}})
	if got := f.backfillPending("b"); got != 0 {
		t.Errorf("pending after b left the set = %d, want 0", got)
	}
}

// backfillPending returns how many fire times the job's backfill queue
// holds.
func (f *FSM) backfillPending(job string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if q := f.st.Backfills[job]; q != nil {
		return len(q.Times)
	}
	return 0
}

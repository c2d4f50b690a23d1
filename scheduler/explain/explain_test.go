package explain

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

func explainIn(spec jobs.Spec, asked string, runs map[time.Time]jobs.Run) ExplainInput {
	spec.Normalize()
	return ExplainInput{
		Spec: spec, Asked: asked, Now: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		Run: func(at time.Time) (*jobs.Run, error) {
			for k, r := range runs {
				if k.Equal(at) {
					return &r, nil
				}
			}
			return nil, nil
		},
		PausedAt: func(time.Time) (bool, bool, error) { return false, false, nil },
	}
}

func TestExplain(t *testing.T) {
	berlin := jobs.Spec{Name: "nightly", Schedules: []string{"30 2 * * *"}, Timezone: "Europe/Berlin"}
	t.Run("forbid skip names the open run", func(t *testing.T) {
		at := time.Date(2026, 7, 1, 0, 30, 0, 0, time.UTC)
		reason := "previous run nightly@20260630T003000Z still open (overlap: forbid)"
		ex, err := Explain(explainIn(berlin, "2026-07-01T02:30", map[time.Time]jobs.Run{at: {ID: jobs.RunID("nightly", at), State: jobs.Skipped, Reason: reason}}))
		if err != nil {
			t.Fatal(err)
		}
		if !ex.FireTime || len(ex.Fates) != 1 || ex.Fates[0].Outcome != FateSkipped || ex.Fates[0].Reason != reason {
			t.Fatalf("explanation = %+v, want one skipped fate with the forbid reason", ex)
		}
	})
	t.Run("gap shift", func(t *testing.T) {
		jump := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
		ex, err := Explain(explainIn(berlin, "2026-03-29T02:30", map[time.Time]jobs.Run{jump: {State: jobs.Succeeded, Attempts: []jobs.Attempt{{}}}}))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(ex.DST, "does not exist") || !strings.Contains(ex.DST, "02:00 to 03:00") || !strings.Contains(ex.DST, "shift") {
			t.Errorf("dst = %q", ex.DST)
		}
		if len(ex.Fates) != 1 || !ex.Fates[0].At.Equal(jump) || ex.Fates[0].Outcome != FateRan {
			t.Errorf("fates = %+v, want the 03:00 CEST run", ex.Fates)
		}
	})
	t.Run("gap skip", func(t *testing.T) {
		s := berlin
		s.DST.Spring = jobs.SpringSkip
		ex, err := Explain(explainIn(s, "2026-03-29T02:30", nil))
		if err != nil {
			t.Fatal(err)
		}
		if ex.FireTime || len(ex.Fates) != 1 || ex.Fates[0].Outcome != FateNotFired || !strings.Contains(ex.DST, "skip") {
			t.Errorf("explanation = %+v, want not fired under spring: skip", ex)
		}
		if got, want := ex.Next, time.Date(2026, 3, 30, 0, 30, 0, 0, time.UTC); !got.Equal(want) {
			t.Errorf("next = %s, want %s", got, want)
		}
	})
	t.Run("repeat once", func(t *testing.T) {
		ex, err := Explain(explainIn(berlin, "2026-10-25T02:30", nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(ex.Fates) != 2 || ex.Fates[0].Outcome != FateUnrecorded || ex.Fates[1].Outcome != FateNotFired || !strings.Contains(ex.DST, "twice") {
			t.Errorf("explanation = %+v, want the first unrecorded, the repeat not fired", ex)
		}
	})
	t.Run("not a fire time", func(t *testing.T) {
		ex, err := Explain(explainIn(berlin, "2026-07-01T03:00:00+02:00", nil))
		if err != nil {
			t.Fatal(err)
		}
		if ex.FireTime || len(ex.Fates) != 0 {
			t.Fatalf("explanation = %+v, want no fire time", ex)
		}
		if !ex.Previous.Equal(time.Date(2026, 7, 1, 0, 30, 0, 0, time.UTC)) || !ex.Next.Equal(time.Date(2026, 7, 2, 0, 30, 0, 0, time.UTC)) {
			t.Errorf("previous, next = %s, %s", ex.Previous, ex.Next)
		}
	})
	t.Run("a manual run's id", func(t *testing.T) {
		greet := jobs.Spec{Name: "greet", Schedules: []string{"*/10 * * * *"}}
		at := time.Date(2026, 10, 2, 2, 56, 21, 446e6, time.UTC)
		id := jobs.RunID("greet", at) // greet@20261002T025621.446Z
		run := jobs.Run{ID: id, Job: "greet", ScheduledAt: at, Trigger: "manual", State: jobs.Succeeded, Attempts: []jobs.Attempt{{Number: 1, State: jobs.Succeeded}}}
		_, asked, _ := strings.Cut(id, "@")
		ex, err := Explain(explainIn(greet, asked, map[time.Time]jobs.Run{at: run}))
		if err != nil {
			t.Fatal(err)
		}
		if len(ex.Fates) != 1 || ex.Fates[0].Run == nil || ex.Fates[0].Run.ID != id || ex.Fates[0].Outcome != FateRan || !ex.HasRun() {
			t.Fatalf("explanation = %+v, want the manual run %s", ex, id)
		}
		if want := "a manual run, not a fire time of the schedule: succeeded after 1 attempt(s)"; ex.Fates[0].Reason != want {
			t.Errorf("reason = %q, want %q", ex.Fates[0].Reason, want)
		}
	})
	t.Run("skip range, paused, future", func(t *testing.T) {
		in := explainIn(berlin, "2026-07-03T02:30", nil)
		in.Skips = []jobs.SkipRange{{Job: "nightly", From: time.Date(2026, 7, 2, 0, 30, 0, 0, time.UTC), To: time.Date(2026, 7, 4, 0, 30, 0, 0, time.UTC), Count: 3, Reason: "older than catchup_window 1h"}}
		if ex, _ := Explain(in); ex.Fates[0].Outcome != FateSkipped || !strings.Contains(ex.Fates[0].Reason, "catchup_window") {
			t.Errorf("fates = %+v, want skipped by the catch-up window", ex.Fates)
		}
		in = explainIn(berlin, "2026-07-03T02:30", nil)
		in.PausedAt = func(time.Time) (bool, bool, error) { return true, true, nil }
		if ex, _ := Explain(in); ex.Fates[0].Outcome != FatePaused {
			t.Errorf("fates = %+v, want paused", ex.Fates)
		}
		if ex, _ := Explain(explainIn(berlin, "2027-01-01T02:30", nil)); ex.Fates[0].Outcome != FateFuture {
			t.Errorf("fates = %+v, want future", ex.Fates)
		}
	})
	t.Run("bad time", func(t *testing.T) {
		if _, err := Explain(explainIn(berlin, "yesterday", nil)); !errors.Is(err, ErrBadTime) {
			t.Errorf("err = %v, want ErrBadTime", err)
		}
	})
}

package scheduler

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestBackfillTimes(t *testing.T) {
	daily := jobs.Spec{Name: "d", Schedules: []string{"0 0 2 * * *"}, Timezone: "Europe/Berlin"}
	from := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	got, err := backfillTimes(daily, from, from.Add(72*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// 02:00 in Berlin (summer, UTC+2) is midnight UTC: from is included,
	// to excluded.
	want := []time.Time{from, from.Add(24 * time.Hour), from.Add(48 * time.Hour)}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("times = %v, want %v", got, want)
	}
	var be *fsm.BackfillError
	if _, err := backfillTimes(daily, from, from); !errors.As(err, &be) || !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Errorf("empty range: %v, want a BackfillError", err)
	}
	often := jobs.Spec{Name: "o", Schedules: []string{"@every 1s"}}
	if _, err := backfillTimes(often, from, from.Add(replicated.MaxBackfillTimes*time.Second)); err != nil {
		t.Errorf("exactly %d times: %v", replicated.MaxBackfillTimes, err)
	}
	if _, err := backfillTimes(often, from, from.Add((replicated.MaxBackfillTimes+1)*time.Second)); !errors.As(err, &be) {
		t.Errorf("%d times: %v, want a BackfillError", replicated.MaxBackfillTimes+1, err)
	}
}

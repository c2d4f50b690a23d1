package jobs

import (
	"testing"
	"time"
)

func TestResolveWall(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	wall := func(mo time.Month, d, h, mi int) time.Time { return time.Date(2026, mo, d, h, mi, 0, 0, time.UTC) }
	t.Run("gap", func(t *testing.T) {
		r := ResolveWall(wall(3, 29, 2, 30), berlin)
		if len(r.Instants) != 0 {
			t.Fatalf("instants = %v, want none", r.Instants)
		}
		if got, want := r.Jump, time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC); !got.Equal(want) {
			t.Errorf("jump = %s, want %s", got, want)
		}
		if got, want := r.From.Format("15:04")+"-"+r.To.Format("15:04"), "02:00-03:00"; got != want {
			t.Errorf("jumped %s, want %s", got, want)
		}
	})
	t.Run("repeat", func(t *testing.T) {
		r := ResolveWall(wall(10, 25, 2, 30), berlin)
		if len(r.Instants) != 2 {
			t.Fatalf("instants = %v, want two", r.Instants)
		}
		if got, want := r.Instants[0].UTC(), time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC); !got.Equal(want) {
			t.Errorf("first = %s, want %s", got, want)
		}
		if got, want := r.Instants[1].Sub(r.Instants[0]), time.Hour; got != want {
			t.Errorf("second - first = %s, want %s", got, want)
		}
	})
	t.Run("plain", func(t *testing.T) {
		r := ResolveWall(wall(7, 1, 9, 0), berlin)
		if len(r.Instants) != 1 || !r.Instants[0].Equal(time.Date(2026, 7, 1, 7, 0, 0, 0, time.UTC)) {
			t.Errorf("instants = %v, want 07:00Z", r.Instants)
		}
	})
}

func TestSchedule_Prev(t *testing.T) {
	for _, tc := range []struct {
		expr, tz string
		at, want time.Time
	}{
		{"30 2 * * *", "Europe/Berlin", time.Date(2026, 7, 2, 0, 0, 0, 0, time.UTC), time.Date(2026, 7, 1, 0, 30, 0, 0, time.UTC)},
		{"@every 90s", "", time.Unix(1000, 0), time.Unix(990, 0)},
		{"@every 90s", "", time.Unix(990, 0), time.Unix(900, 0)},
		{"* * 1 * *", "", time.Date(2026, 7, 20, 0, 0, 0, 0, time.UTC), time.Date(2026, 7, 1, 23, 59, 0, 0, time.UTC)},
		{"0 0 29 2 *", "", time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)},
	} {
		s, err := ParseSchedule([]string{tc.expr}, tc.tz)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Prev(tc.at); !got.Equal(tc.want) {
			t.Errorf("%s Prev(%s) = %s, want %s", tc.expr, tc.at, got, tc.want)
		}
		if !s.IsFireTime(tc.want) || s.IsFireTime(tc.want.Add(time.Second)) {
			t.Errorf("%s: IsFireTime wrong around %s", tc.expr, tc.want)
		}
	}
	s, _ := ParseSchedule([]string{"30 2 * * *"}, "Europe/Berlin")
	if !s.MatchesWall(time.Date(2026, 3, 29, 2, 30, 0, 0, time.UTC)) || s.MatchesWall(time.Date(2026, 3, 29, 2, 31, 0, 0, time.UTC)) {
		t.Error("MatchesWall wrong for 02:30 / 02:31")
	}
}

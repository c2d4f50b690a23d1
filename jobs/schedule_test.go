package jobs_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/fencecron/fencecron/jobs"
)

const layout = "2006-01-02 15:04:05 MST"

// MustSchedule builds a schedule or fails the test.
func MustSchedule(tb testing.TB, exprs []string, tz string, dst jobs.DSTPolicy) *jobs.Schedule {
	tb.Helper()
	s, err := jobs.NewSchedule(exprs, tz, dst)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// MustTime parses "2006-01-02 15:04:05" in zone tz, or in UTC if v ends
// in " UTC" (for wall times the zone shows twice).
func MustTime(tb testing.TB, tz, v string) time.Time {
	tb.Helper()
	if s, ok := strings.CutSuffix(v, " UTC"); ok {
		v, tz = s, "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		tb.Fatal(err)
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05", v, loc)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func fireTimes(s *jobs.Schedule, from time.Time, n int) []string {
	var out []string
	for _, t := range s.NextN(from, n) {
		out = append(out, t.Format(layout))
	}
	return out
}

// Golden fire times around the 2026 transitions:
// America/New_York springs forward 2026-03-08 02:00 EST -> 03:00 EDT and
// falls back 2026-11-01 02:00 EDT -> 01:00 EST; Europe/Berlin springs
// forward 2026-03-29 02:00 CET -> 03:00 CEST and falls back 2026-10-25
// 03:00 CEST -> 02:00 CET.
func TestSchedule_Next_DST(t *testing.T) {
	shiftOnce := jobs.DSTPolicy{}
	skip := jobs.DSTPolicy{Spring: jobs.SpringSkip}
	twice := jobs.DSTPolicy{Fall: jobs.FallTwice}
	tests := []struct {
		name  string
		exprs []string
		tz    string
		dst   jobs.DSTPolicy
		from  string // in tz
		want  []string
	}{
		{"new york spring 02:30 shift", []string{"30 2 * * *"}, "America/New_York", shiftOnce, "2026-03-06 12:00:00", []string{
			"2026-03-07 02:30:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-09 02:30:00 EDT", "2026-03-10 02:30:00 EDT"}},
		{"new york spring 02:30 skip", []string{"30 2 * * *"}, "America/New_York", skip, "2026-03-06 12:00:00", []string{
			"2026-03-07 02:30:00 EST", "2026-03-09 02:30:00 EDT", "2026-03-10 02:30:00 EDT"}},
		{"new york spring hourly", []string{"0 * * * *"}, "America/New_York", shiftOnce, "2026-03-08 00:30:00", []string{
			"2026-03-08 01:00:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-08 04:00:00 EDT"}},
		{"new york spring hourly skip", []string{"0 * * * *"}, "America/New_York", skip, "2026-03-08 00:30:00", []string{
			"2026-03-08 01:00:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-08 04:00:00 EDT"}},
		{"new york spring every 15 minutes shift", []string{"*/15 * * * *"}, "America/New_York", shiftOnce, "2026-03-08 01:40:00", []string{
			"2026-03-08 01:45:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-08 03:15:00 EDT"}},
		{"new york spring two expressions shift to one instant", []string{"30 2 * * *", "0 3 * * *"}, "America/New_York", shiftOnce, "2026-03-08 00:00:00", []string{
			"2026-03-08 03:00:00 EDT", "2026-03-09 02:30:00 EDT", "2026-03-09 03:00:00 EDT"}},
		{"new york spring six fields", []string{"30 30 2 * * *"}, "America/New_York", shiftOnce, "2026-03-08 00:00:00", []string{
			"2026-03-08 03:00:00 EDT", "2026-03-09 02:30:30 EDT"}},
		{"new york fall 01:30 once", []string{"30 1 * * *"}, "America/New_York", shiftOnce, "2026-10-31 12:00:00", []string{
			"2026-11-01 01:30:00 EDT", "2026-11-02 01:30:00 EST", "2026-11-03 01:30:00 EST"}},
		{"new york fall 01:30 twice", []string{"30 1 * * *"}, "America/New_York", twice, "2026-10-31 12:00:00", []string{
			"2026-11-01 01:30:00 EDT", "2026-11-01 01:30:00 EST", "2026-11-02 01:30:00 EST"}},
		{"new york fall 02:30 is not ambiguous", []string{"30 2 * * *"}, "America/New_York", shiftOnce, "2026-10-31 12:00:00", []string{
			"2026-11-01 02:30:00 EST", "2026-11-02 02:30:00 EST"}},
		{"new york fall hourly once", []string{"0 * * * *"}, "America/New_York", shiftOnce, "2026-11-01 00:30:00", []string{
			"2026-11-01 01:00:00 EDT", "2026-11-01 02:00:00 EST", "2026-11-01 03:00:00 EST"}},
		{"new york fall hourly twice", []string{"0 * * * *"}, "America/New_York", twice, "2026-11-01 00:30:00", []string{
			"2026-11-01 01:00:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 02:00:00 EST"}},
		{"berlin spring 02:30 shift", []string{"30 2 * * *"}, "Europe/Berlin", shiftOnce, "2026-03-28 12:00:00", []string{
			"2026-03-29 03:00:00 CEST", "2026-03-30 02:30:00 CEST"}},
		{"berlin spring 02:30 skip", []string{"30 2 * * *"}, "Europe/Berlin", skip, "2026-03-28 12:00:00", []string{
			"2026-03-30 02:30:00 CEST", "2026-03-31 02:30:00 CEST"}},
		{"berlin fall 02:30 once", []string{"30 2 * * *"}, "Europe/Berlin", shiftOnce, "2026-10-24 12:00:00", []string{
			"2026-10-25 02:30:00 CEST", "2026-10-26 02:30:00 CET"}},
		{"berlin fall 02:30 twice", []string{"30 2 * * *"}, "Europe/Berlin", twice, "2026-10-24 12:00:00", []string{
			"2026-10-25 02:30:00 CEST", "2026-10-25 02:30:00 CET", "2026-10-26 02:30:00 CET"}},
		{"berlin fall from inside the repeated hour, once", []string{"*/20 * * * *"}, "Europe/Berlin", shiftOnce, "2026-10-25 01:50:00 UTC", []string{
			"2026-10-25 03:00:00 CET", "2026-10-25 03:20:00 CET"}},
		{"berlin daily descriptor across spring", []string{"@daily"}, "Europe/Berlin", shiftOnce, "2026-03-28 12:00:00", []string{
			"2026-03-29 00:00:00 CET", "2026-03-30 00:00:00 CEST"}},
		{"leap day", []string{"0 0 29 2 *"}, "Europe/Berlin", shiftOnce, "2025-01-01 00:00:00", []string{
			"2028-02-29 00:00:00 CET", "2032-02-29 00:00:00 CET"}},
		{"leap day 6 fields in utc", []string{"0 30 12 29 2 *"}, "UTC", shiftOnce, "2028-02-29 12:30:00", []string{
			"2032-02-29 12:30:00 UTC"}},
		{"31st only in long months", []string{"0 9 31 * *"}, "America/New_York", shiftOnce, "2026-01-01 00:00:00", []string{
			"2026-01-31 09:00:00 EST", "2026-03-31 09:00:00 EDT", "2026-05-31 09:00:00 EDT", "2026-07-31 09:00:00 EDT", "2026-08-31 09:00:00 EDT"}},
		{"30th skips february", []string{"0 0 30 * *"}, "UTC", shiftOnce, "2026-01-15 00:00:00", []string{
			"2026-01-30 00:00:00 UTC", "2026-03-30 00:00:00 UTC"}},
		{"last days of february", []string{"0 0 28,29 2 *"}, "UTC", shiftOnce, "2027-02-01 00:00:00", []string{
			"2027-02-28 00:00:00 UTC", "2028-02-28 00:00:00 UTC", "2028-02-29 00:00:00 UTC"}},
		{"month end to year end", []string{"59 23 31 12 *"}, "Europe/Berlin", shiftOnce, "2026-12-31 23:59:00", []string{
			"2027-12-31 23:59:00 CET"}},
		{"every hour across new york spring", []string{"@every 1h"}, "America/New_York", shiftOnce, "2026-03-08 00:30:00", []string{
			"2026-03-08 01:00:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-08 04:00:00 EDT"}},
		{"every hour across new york fall", []string{"@every 1h"}, "America/New_York", shiftOnce, "2026-11-01 00:30:00", []string{
			"2026-11-01 01:00:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 02:00:00 EST"}},
		{"every 90s across berlin fall", []string{"@every 90s"}, "Europe/Berlin", shiftOnce, "2026-10-25 00:58:00 UTC", []string{
			"2026-10-25 02:58:30 CEST", "2026-10-25 02:00:00 CET", "2026-10-25 02:01:30 CET"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustSchedule(t, tt.exprs, tt.tz, tt.dst)
			from := MustTime(t, tt.tz, tt.from)
			if got, want := strings.Join(fireTimes(s, from, len(tt.want)), "\n"), strings.Join(tt.want, "\n"); got != want {
				t.Errorf("fire times after %s:\n%s\nwant:\n%s", from.Format(layout), got, want)
			}
		})
	}
}

// The fire time that was just returned is never returned again, and a
// shifted fire time is a distinct instant from the neighbours.
func TestSchedule_Next_StrictlyAfter(t *testing.T) {
	s := MustSchedule(t, []string{"30 2 * * *"}, "America/New_York", jobs.DSTPolicy{})
	at := MustTime(t, "America/New_York", "2026-03-08 03:00:00")
	if got := s.Next(at); !got.After(at) {
		t.Fatalf("Next(%s) = %s, want a later time", at, got)
	}
	if got := s.Next(at.Add(-time.Nanosecond)); !got.Equal(at) {
		t.Errorf("Next just before the shifted time = %s, want %s", got.Format(layout), at.Format(layout))
	}
}

// robfig/cron's own Next is wrong at both transitions; this is why the
// schedule maps wall-clock times itself. If this test fails, robfig
// changed and the comment on Schedule needs another look.
func TestRobfigNext_IsWrongAtTransitions(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	p := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	spring, _ := p.Parse("30 2 * * *")
	spring.(*cron.SpecSchedule).Location = ny
	got := spring.Next(MustTime(t, "America/New_York", "2026-03-07 12:00:00"))
	if got.Day() == 8 {
		t.Errorf("robfig fired on the spring-forward day (%s); it used to skip it", got)
	}
	fall, _ := p.Parse("30 1 * * *")
	fall.(*cron.SpecSchedule).Location = ny
	first := fall.Next(MustTime(t, "America/New_York", "2026-10-31 12:00:00"))
	second := fall.Next(first)
	if second.Day() != 1 {
		t.Errorf("robfig fired once on the fall-back day (%s, %s); it used to fire twice", first, second)
	}
}

func TestNewSchedule_Errors(t *testing.T) {
	tests := []struct {
		exprs []string
		tz    string
		dst   jobs.DSTPolicy
		want  string
	}{
		{nil, "", jobs.DSTPolicy{}, "no schedule"},
		{[]string{""}, "", jobs.DSTPolicy{}, "empty expression"},
		{[]string{"* * * *"}, "", jobs.DSTPolicy{}, "want 5 fields"},
		{[]string{"* * * * * * *"}, "", jobs.DSTPolicy{}, "got 7"},
		{[]string{"61 * * * *"}, "", jobs.DSTPolicy{}, "above maximum"},
		{[]string{"0 0 30 2 *"}, "", jobs.DSTPolicy{}, "never fires"},
		{[]string{"@every"}, "", jobs.DSTPolicy{}, "@every needs a Go duration"},
		{[]string{"@every 500ms"}, "", jobs.DSTPolicy{}, "at least 1s"},
		{[]string{"@every 1.5s"}, "", jobs.DSTPolicy{}, "whole number of seconds"},
		{[]string{"@every1h"}, "", jobs.DSTPolicy{}, "unrecognized descriptor"},
		{[]string{"@fortnightly"}, "", jobs.DSTPolicy{}, "unrecognized descriptor"},
		{[]string{"TZ=Europe/Berlin 0 9 * * *"}, "", jobs.DSTPolicy{}, "time zone prefix"},
		{[]string{"TZ=X"}, "", jobs.DSTPolicy{}, "time zone prefix"},
		{[]string{"@daily"}, "Mars/Olympus", jobs.DSTPolicy{}, "unknown time zone"},
		{[]string{"@daily"}, "Local", jobs.DSTPolicy{}, "depends on the host"},
		{[]string{"@daily"}, "", jobs.DSTPolicy{Spring: "later"}, "dst spring"},
		{[]string{"@daily"}, "", jobs.DSTPolicy{Fall: "thrice"}, "dst fall"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.exprs, tt.tz, tt.dst), func(t *testing.T) {
			_, err := jobs.NewSchedule(tt.exprs, tt.tz, tt.dst)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// The @every interval is anchored at the Unix epoch, so two leaders that
// start at different moments agree on the fire times.
func TestSchedule_Next_EveryIsAnchored(t *testing.T) {
	s := MustSchedule(t, []string{"@every 7m"}, "UTC", jobs.DSTPolicy{})
	a := s.Next(time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC))
	b := s.Next(a.Add(-time.Minute))
	if !a.Equal(b) {
		t.Errorf("fire times depend on the start: %s vs %s", a, b)
	}
	if a.Unix()%(7*60) != 0 {
		t.Errorf("%s is not a multiple of 7m since the epoch", a)
	}
	before := s.Next(time.Unix(-1, 0))
	if got, want := before, time.Unix(0, 0); !got.Equal(want) {
		t.Errorf("Next before the epoch = %s, want %s", got, want)
	}
}

// Against a brute-force reference that resolves every wall-clock candidate
// by searching the zone's instants directly, in zones with unusual rules,
// around every transition of a year.
func TestSchedule_Next_MatchesReference(t *testing.T) {
	zones := []struct {
		tz   string
		year int
	}{
		{"America/New_York", 2026},
		{"Europe/Berlin", 2026},
		{"Australia/Lord_Howe", 2026}, // 30-minute DST
		{"Australia/Sydney", 2026},    // southern hemisphere
		{"America/Sao_Paulo", 2018},   // DST began at midnight
		{"Europe/Dublin", 2026},       // negative DST in the zone data
		{"Pacific/Apia", 2011},        // skipped 2011-12-30 entirely
	}
	exprs := []string{"*/20 * * * *", "30 2 * * *", "0 0 * * *", "45 1 * * 0", "0 */3 * * *", "30 0 1 * *"}
	policies := []jobs.DSTPolicy{{}, {Spring: jobs.SpringSkip, Fall: jobs.FallTwice}}
	for _, z := range zones {
		loc, err := time.LoadLocation(z.tz)
		if err != nil {
			t.Fatal(err)
		}
		transitions := transitionsIn(loc, z.year)
		if len(transitions) == 0 {
			t.Fatalf("%s has no transitions in %d", z.tz, z.year)
		}
		for _, e := range exprs {
			for _, p := range policies {
				name := fmt.Sprintf("%s/%s/%s-%s", z.tz, e, p.Spring, p.Fall)
				t.Run(name, func(t *testing.T) {
					s := MustSchedule(t, []string{e}, z.tz, p)
					for _, tr := range transitions {
						from, to := tr.Add(-30*time.Hour), tr.Add(30*time.Hour)
						want := reference(t, e, loc, p, from, to)
						var got []time.Time
						for n := s.Next(from); !n.IsZero() && n.Before(to); n = s.Next(n) {
							got = append(got, n)
							if len(got) > 1000 {
								t.Fatal("too many fire times")
							}
						}
						if !slices.EqualFunc(got, want, time.Time.Equal) {
							t.Errorf("around %s:\n got %s\nwant %s", tr.In(loc).Format(layout), formatAll(got, loc), formatAll(want, loc))
						}
					}
				})
			}
		}
	}
}

// transitionsIn returns the instants at which loc changes offset in year.
func transitionsIn(loc *time.Location, year int) []time.Time {
	var out []time.Time
	t := time.Date(year, 1, 1, 0, 0, 0, 0, loc)
	endYear := time.Date(year+1, 1, 1, 0, 0, 0, 0, loc)
	for range 20 {
		_, end := t.ZoneBounds()
		if end.IsZero() || !end.Before(endYear) {
			break
		}
		out = append(out, end)
		t = end.In(loc)
	}
	return out
}

// reference computes the fire times in (from, to) by definition: each
// wall-clock candidate fires at each instant whose wall clock shows it
// (the first only, under fall once); a candidate no instant shows fires
// at the first instant after it (spring shift) or not at all (skip).
func reference(tb testing.TB, expr string, loc *time.Location, p jobs.DSTPolicy, from, to time.Time) []time.Time {
	tb.Helper()
	c, err := cron.ParseStandard(expr)
	if err != nil {
		tb.Fatal(err)
	}
	spec := c.(*cron.SpecSchedule)
	spec.Location = time.UTC
	wall := func(x time.Time) time.Time {
		y, mo, d := x.In(loc).Date()
		h, mi, s := x.In(loc).Clock()
		return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
	}
	// Every offset the zone uses near the window.
	var offsets []time.Duration
	for x := from.Add(-48 * time.Hour); x.Before(to.Add(48 * time.Hour)); x = x.Add(30 * time.Minute) {
		_, off := x.In(loc).Zone()
		if d := time.Duration(off) * time.Second; !slices.Contains(offsets, d) {
			offsets = append(offsets, d)
		}
	}
	var out []time.Time
	add := func(x time.Time) {
		if x.After(from) && x.Before(to) && !slices.ContainsFunc(out, x.Equal) {
			out = append(out, x)
		}
	}
	for cand := spec.Next(wall(from).Add(-30 * time.Hour)); cand.Before(wall(to).Add(30 * time.Hour)); cand = spec.Next(cand) {
		// Every instant that shows cand.
		var occ []time.Time
		for _, off := range offsets {
			x := cand.Add(-off)
			if wall(x).Equal(cand) && !slices.ContainsFunc(occ, x.Equal) {
				occ = append(occ, x)
			}
		}
		slices.SortFunc(occ, time.Time.Compare)
		switch {
		case len(occ) == 0 && p.Spring != jobs.SpringSkip:
			// Binary search for the first instant whose wall clock is
			// past cand.
			lo, hi := cand.Add(-15*time.Hour), cand.Add(15*time.Hour)
			for hi.Sub(lo) > time.Second {
				mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
				if wall(mid).After(cand) {
					hi = mid
				} else {
					lo = mid
				}
			}
			add(hi)
		case len(occ) > 1 && p.Fall != jobs.FallTwice:
			add(occ[0])
		default:
			for _, x := range occ {
				add(x)
			}
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func formatAll(ts []time.Time, loc *time.Location) string {
	var b strings.Builder
	for _, t := range ts {
		b.WriteString("\n  " + t.In(loc).Format(layout))
	}
	return b.String()
}

func FuzzParseExpr(f *testing.F) {
	for _, s := range []string{"*/5 * * * * *", "0 9 1 * *", "@daily", "@every 90s", "TZ=", "CRON_TZ=X", "0 0 30 2 *", "1-5/0 * * * *", "@every -1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := jobs.NewSchedule([]string{expr}, "Europe/Berlin", jobs.DSTPolicy{})
		if err != nil {
			return
		}
		from := time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC)
		prev := from
		for _, n := range s.NextN(from, 5) {
			if !n.After(prev) {
				t.Fatalf("%q: fire times not increasing: %s then %s", expr, prev, n)
			}
			prev = n
		}
	})
}

// ParseExpr keeps the parsed form of expressions it saw: a second parse
// answers the same, and a caller that changes what it got changes nothing
// for the next one.
func TestParseExpr_Cached(t *testing.T) {
	for _, expr := range []string{"7 3 * * *", "@hourly", "@every 90s", "*/5 * * * * *"} {
		t.Run(expr, func(t *testing.T) {
			w1, e1, err := jobs.ParseExpr(expr)
			if err != nil {
				t.Fatal(err)
			}
			if w1 != nil {
				w1.Minute, w1.Location = 0, time.Local
			}
			w2, e2, err := jobs.ParseExpr(expr)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := e2, e1; got != want {
				t.Errorf("every = %s, then %s", want, got)
			}
			if (w1 == nil) != (w2 == nil) {
				t.Fatalf("wall = %v, then %v", w1, w2)
			}
			if w2 == nil {
				return
			}
			if w2 == w1 || w2.Minute == 0 || w2.Location != time.UTC {
				t.Errorf("second parse = %+v: it shares or reflects the first caller's copy", w2)
			}
		})
	}
	if _, _, err := jobs.ParseExpr("61 * * * *"); err == nil {
		t.Error("61 * * * *: no error")
	}
	if _, _, err := jobs.ParseExpr("61 * * * *"); err == nil {
		t.Error("61 * * * *, again: no error")
	}
}

// A step larger than its field's range fires only once per cycle under
// robfig; crontabs refuse it, and so does a schedule, naming the field
// and where the step is.
func TestParseSchedule_StepLargerThanRange(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"*/61 * * * *", `minute field "*/61" (character 3): step 61 is larger than the field's range 0-59`},
		{"0 */25 * * *", `hour field "*/25" (character 5): step 25 is larger than the field's range 0-23`},
		{"0 0 1-31/32 * *", `day-of-month field "1-31/32" (character 10): step 32 is larger than the field's range 1-31`},
		{"*/70 * * * * *", `second field "*/70" (character 3): step 70 is larger than the field's range 0-59`},
		{"0 0 * * */8", `day-of-week field "*/8" (character 11): step 8 is larger than the field's range 0-7`},
	} {
		if _, err := jobs.ParseSchedule([]string{tc.expr}, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSchedule(%q) = %v, want an error with %q", tc.expr, err, tc.want)
		}
	}
	for _, ok := range []string{"*/59 * * * *", "*/60 * * * *", "0 */23 * * *", "0 0 * * */7", "0,*/30 * * * *"} {
		if _, err := jobs.ParseSchedule([]string{ok}, ""); err != nil {
			t.Errorf("ParseSchedule(%q): %v", ok, err)
		}
	}
}

// Day of week 7 is Sunday, as in Vixie cron and cronie, alone, as a
// range's end and in a list.
func TestParseSchedule_SundayIsSeven(t *testing.T) {
	from := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) // a Wednesday
	for _, tc := range []struct {
		expr string
		want []time.Weekday
	}{
		{"0 1 * * 7", []time.Weekday{time.Sunday, time.Sunday}},
		{"0 1 * * 5-7", []time.Weekday{time.Friday, time.Saturday, time.Sunday, time.Friday}},
		{"0 1 * * 1,7", []time.Weekday{time.Sunday, time.Monday, time.Sunday}},
		{"0 1 * * 6-7/1", []time.Weekday{time.Saturday, time.Sunday, time.Saturday}},
	} {
		s, err := jobs.ParseSchedule([]string{tc.expr}, "")
		if err != nil {
			t.Errorf("ParseSchedule(%q): %v", tc.expr, err)
			continue
		}
		var got []time.Weekday
		for _, t := range s.NextN(from, len(tc.want)) {
			got = append(got, t.Weekday())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q fires on %v, want %v", tc.expr, got, tc.want)
		}
	}
}

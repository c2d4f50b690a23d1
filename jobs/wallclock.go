package jobs

import (
	"slices"
	"time"
)

// WallReading is what a wall-clock reading (a date and time without an
// offset) names in a time zone: usually one instant; none when the
// reading falls in a spring-forward gap; two when it falls in the hour a
// fall-back repeats.
type WallReading struct {
	// Instants are the instants the reading names, oldest first.
	Instants []time.Time
	// Jump is, for a reading in a gap, the instant the clocks jumped
	// forward; From and To are the wall readings they jumped from and to
	// (as naive UTC times, like the reading).
	Jump     time.Time
	From, To time.Time
}

// ResolveWall returns the instants the wall reading wall (its fields
// read as a naive clock: the zone of wall is ignored) names in loc.
func ResolveWall(wall time.Time, loc *time.Location) WallReading {
	naiveT := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), wall.Nanosecond(), time.UTC)
	// The offsets in force a day either side: a reading names an instant
	// under an offset if that instant, read in loc, shows it.
	var offs []time.Duration
	for _, d := range []time.Duration{-36 * time.Hour, 0, 36 * time.Hour} {
		if o := offset(naiveT.Add(d).In(loc)); !slices.Contains(offs, o) {
			offs = append(offs, o)
		}
	}
	var r WallReading
	for _, o := range offs {
		inst := naiveT.Add(-o)
		if offset(inst.In(loc)) == o && !slices.ContainsFunc(r.Instants, inst.Equal) {
			r.Instants = append(r.Instants, inst.In(loc))
		}
	}
	slices.SortFunc(r.Instants, func(a, b time.Time) int { return a.Compare(b) })
	if len(r.Instants) > 0 {
		return r
	}
	// In a gap: read under the smallest offset, the reading lies after
	// the jump; the period holding that instant starts at the jump.
	low := slices.Min(offs)
	start, _ := naiveT.Add(-low).In(loc).ZoneBounds()
	if start.IsZero() {
		return r
	}
	r.Jump = start
	r.From = naive(start, offset(start.Add(-time.Nanosecond).In(loc)))
	r.To = naive(start, offset(start.In(loc)))
	return r
}

// MatchesWall reports whether one of the schedule's wall-clock
// expressions names the naive wall reading wall (its zone ignored),
// whether or not that reading exists in the schedule's zone: what the
// schedule asks for, before the daylight-saving policy applies.
func (s *Schedule) MatchesWall(wall time.Time) bool {
	if wall.Nanosecond() != 0 {
		return false
	}
	n := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, time.UTC)
	for _, w := range s.wall {
		if w.Next(n.Add(-time.Second)).Equal(n) {
			return true
		}
	}
	return false
}

// IsFireTime reports whether t is one of the schedule's fire times.
func (s *Schedule) IsFireTime(t time.Time) bool {
	return s.Next(t.Add(-time.Nanosecond)).Equal(t)
}

// Prev returns the latest fire time strictly before t, or the zero time
// if there is none within about five years. It looks back over windows
// that double in length until one holds a fire time, then halves that
// window down to a second: a few dozen calls of Next, however dense or
// sparse the schedule.
func (s *Schedule) Prev(t time.Time) time.Time {
	const horizon = 5 * 366 * 24 * time.Hour
	before := func(from time.Time) bool { // a fire time in [from, t)?
		n := s.Next(from.Add(-time.Nanosecond))
		return !n.IsZero() && n.Before(t)
	}
	d := time.Second
	for ; !before(t.Add(-d)); d *= 2 {
		if d > horizon {
			return time.Time{}
		}
	}
	// A fire time lies in [lo, t) and none in [hi, t).
	lo, hi := t.Add(-d), t
	for hi.Sub(lo) > time.Second {
		if mid := lo.Add(hi.Sub(lo) / 2); before(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	var last time.Time
	for n, i := s.Next(lo.Add(-time.Nanosecond)), 0; !n.IsZero() && n.Before(hi) && i < 1000; n, i = s.Next(n), i+1 {
		last = n
	}
	return last.In(s.loc)
}

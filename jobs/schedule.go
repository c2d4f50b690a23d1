package jobs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	// Embedded IANA zone data: a node without /usr/share/zoneinfo can
	// still evaluate schedules in named zones.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Daylight-saving policies. Spring: what a wall-clock fire time that does
// not exist on the spring-forward day does. Fall: how often a wall-clock
// fire time that occurs twice on the fall-back day fires.
const (
	// SpringShift fires it at the end of the gap (02:30 runs at 03:00).
	SpringShift = "shift"
	// SpringSkip does not fire it that day.
	SpringSkip = "skip"
	// FallOnce fires at the first occurrence only.
	FallOnce = "once"
	// FallTwice fires at both occurrences: two distinct instants, two runs.
	FallTwice = "twice"
)

// DSTPolicy is a job's daylight-saving policy. The zero value means the
// defaults, shift and once.
type DSTPolicy struct {
	Spring string `json:"spring" yaml:"spring"`
	Fall   string `json:"fall" yaml:"fall"`
}

// withDefaults returns p with empty fields set to the defaults.
func (p DSTPolicy) withDefaults() DSTPolicy {
	if p.Spring == "" {
		p.Spring = SpringShift
	}
	if p.Fall == "" {
		p.Fall = FallOnce
	}
	return p
}

// parser accepts 5 or 6 fields (seconds optional) and @descriptors.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule computes a job's fire times. robfig/cron parses the expressions
// and finds candidate wall-clock times; this type maps them to instants in
// the job's time zone and applies the daylight-saving policy, which robfig
// gets wrong in both directions.
//
// A Schedule is immutable and safe for concurrent use.
type Schedule struct {
	loc   *time.Location
	dst   DSTPolicy
	exprs []string
	// wall are cron expressions evaluated on naive wall-clock time (UTC
	// stands in for "no zone"); every are @every intervals.
	wall  []*cron.SpecSchedule
	every []time.Duration
}

// ParseSchedule parses one or several cron expressions, evaluated in the
// time zone tz ("" means UTC), with the default daylight-saving policy.
func ParseSchedule(exprs []string, tz string) (*Schedule, error) {
	return NewSchedule(exprs, tz, DSTPolicy{})
}

// NewSchedule parses one or several cron expressions, evaluated in the
// time zone tz ("" means UTC), with daylight-saving policy dst (empty
// fields mean the defaults).
func NewSchedule(exprs []string, tz string, dst DSTPolicy) (*Schedule, error) {
	if len(exprs) == 0 {
		return nil, errors.New("no schedule")
	}
	loc, err := LoadZone(tz)
	if err != nil {
		return nil, err
	}
	dst = dst.withDefaults()
	if dst.Spring != SpringShift && dst.Spring != SpringSkip {
		return nil, fmt.Errorf("dst spring %q: want shift or skip", dst.Spring)
	}
	if dst.Fall != FallOnce && dst.Fall != FallTwice {
		return nil, fmt.Errorf("dst fall %q: want once or twice", dst.Fall)
	}
	s := &Schedule{loc: loc, dst: dst, exprs: append([]string(nil), exprs...)}
	for _, e := range exprs {
		wall, every, err := ParseExpr(e)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", e, err)
		}
		if wall != nil {
			s.wall = append(s.wall, wall)
		} else {
			s.every = append(s.every, every)
		}
	}
	return s, nil
}

// LoadZone loads an IANA time zone; "" means UTC. "Local" is refused: the
// nodes of a cluster must agree on every fire time.
func LoadZone(tz string) (*time.Location, error) {
	switch tz {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, errors.New(`time zone "Local" depends on the host; name an IANA zone such as Europe/Berlin`)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name such as America/New_York)", tz)
	}
	return loc, nil
}

// ParseExpr parses one schedule expression: 5 fields (minute hour
// day-of-month month day-of-week), 6 fields (seconds first), a descriptor
// such as @daily, or "@every DURATION" with a whole number of seconds.
// It returns either a wall-clock schedule (zone-less: evaluate it on naive
// UTC times) or an interval.
//
// A large job set repeats a few expressions many times (100,000 jobs,
// 1,440 distinct daily times), and every job is parsed where it is
// checked (the config parser, the leader) and where it is fired: so the
// parsed form of recent expressions is kept (exprCache), and each caller
// gets its own copy of it.
func ParseExpr(expr string) (wall *cron.SpecSchedule, every time.Duration, err error) {
	if p, ok := exprCache.get(expr); ok {
		if p.wall != nil {
			w := *p.wall
			return &w, 0, nil
		}
		return nil, p.every, nil
	}
	wall, every, err = parseExpr(expr)
	if err == nil {
		w := wall
		if w != nil {
			c := *w
			w = &c
		}
		exprCache.put(expr, parsedExpr{wall: w, every: every})
	}
	return wall, every, err
}

// parsedExpr is an expression ParseExpr accepted, as it returned it.
type parsedExpr struct {
	wall  *cron.SpecSchedule
	every time.Duration
}

// maxCachedExprs bounds exprCache: a set of many distinct expressions
// costs a parse each, as without the cache, and no more memory than this.
const maxCachedExprs = 4096

// exprCache holds the parsed form of expressions ParseExpr accepted. Its
// entries are never handed out, only copies of them, so no caller can
// change what another gets. Safe for concurrent use (jobs.CheckSet checks
// on every core).
var exprCache = exprMemo{m: map[string]parsedExpr{}}

type exprMemo struct {
	mu sync.Mutex
	m  map[string]parsedExpr
}

func (c *exprMemo) get(expr string) (parsedExpr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[expr]
	return p, ok
}

// put remembers p, starting afresh when full: the expressions of the
// set being checked come back at once.
func (c *exprMemo) put(expr string, p parsedExpr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedExprs {
		clear(c.m)
	}
	c.m[expr] = p
}

// parseExpr is ParseExpr without the cache.
func parseExpr(expr string) (wall *cron.SpecSchedule, every time.Duration, err error) {
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return nil, 0, errors.New("empty expression")
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		return nil, 0, errors.New("a time zone prefix is not allowed here; set the job's timezone instead")
	case e == "@every" || strings.HasPrefix(e, "@every ") || strings.HasPrefix(e, "@every\t"):
		arg := strings.TrimSpace(strings.TrimPrefix(e, "@every"))
		d, perr := time.ParseDuration(arg)
		switch {
		case arg == "" || perr != nil:
			return nil, 0, fmt.Errorf("@every needs a Go duration such as 90s or 15m, got %q", arg)
		case d < time.Second:
			return nil, 0, errors.New("@every interval must be at least 1s")
		case d%time.Second != 0:
			return nil, 0, errors.New("@every interval must be a whole number of seconds")
		}
		return nil, d, nil
	case !strings.HasPrefix(e, "@"):
		if n := len(strings.Fields(e)); n != 5 && n != 6 {
			return nil, 0, fmt.Errorf("want 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first), got %d", n)
		}
		var err error
		if e, err = checkFields(e); err != nil {
			return nil, 0, err
		}
	}
	c, err := safeParse(e)
	if err != nil {
		return nil, 0, err
	}
	spec, ok := c.(*cron.SpecSchedule)
	if !ok {
		return nil, 0, fmt.Errorf("unsupported expression %q", e)
	}
	spec.Location = time.UTC
	if spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() &&
		spec.Next(time.Date(2003, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, 0, errors.New("never fires (no such date)")
	}
	return spec, 0, nil
}

// cronField is one field of a cron expression: its name and the values
// it takes.
type cronField struct {
	name     string
	min, max int
}

var (
	fields5 = []cronField{{"minute", 0, 59}, {"hour", 0, 23}, {"day-of-month", 1, 31}, {"month", 1, 12}, {"day-of-week", 0, 7}}
	fields6 = append([]cronField{{"second", 0, 59}}, fields5...)
)

// checkFields refuses what robfig/cron accepts but no crontab means (a
// step larger than its field's range, such as */61 for minutes, which
// robfig reads as "minute 0"), and rewrites day-of-week 7 as 0: Vixie
// cron, cronie and most crontabs take 7 for Sunday, robfig does not. It
// returns the expression robfig is to parse.
func checkFields(e string) (string, error) {
	words := strings.Fields(e)
	fields := fields5
	if len(words) == 6 {
		fields = fields6
	}
	col := 0 // where the field starts in e, for the message
	for i, w := range words {
		col = strings.Index(e[col:], w) + col
		f := fields[i]
		var parts []string
		for _, part := range strings.Split(w, ",") {
			rng, step, hasStep := strings.Cut(part, "/")
			if hasStep {
				size := f.max - f.min + 1
				if f.name == "day-of-week" {
					size = 7 // 0 and 7 are both Sunday
				}
				if n, err := strconv.Atoi(step); err == nil && n > size {
					at := col + strings.Index(w, part) + len(rng) + 2
					return "", fmt.Errorf("%s field %q (character %d): step %d is larger than the field's range %d-%d, so it would fire only at its first value", f.name, w, at, n, f.min, f.max)
				}
			}
			if f.name == "day-of-week" {
				part = sundayAsZero(rng, step, hasStep, part)
			}
			parts = append(parts, part)
		}
		words[i] = strings.Join(parts, ",")
		col += len(w)
	}
	return strings.Join(words, " "), nil
}

// sundayAsZero rewrites one part of a day-of-week field that names day 7
// (alone or as a range's end) with 0, Sunday, which robfig knows.
func sundayAsZero(rng, step string, hasStep bool, part string) string {
	lo, hi, isRange := strings.Cut(rng, "-")
	switch {
	case !isRange && rng == "7":
		if hasStep {
			return "0/" + step
		}
		return "0"
	case isRange && hi == "7":
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > 7 {
			return part // robfig's own message says what is wrong
		}
		n := 1
		if hasStep {
			if n, err = strconv.Atoi(step); err != nil || n < 1 {
				return part
			}
		}
		// The days the range names, with 7 as 0.
		var days []string
		for d := a; d <= 7; d += n {
			days = append(days, strconv.Itoa(d%7))
		}
		return strings.Join(days, ",")
	}
	return part
}

// safeParse calls robfig's parser, turning a panic on odd input into an
// error.
func safeParse(e string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("cannot parse %q", e)
		}
	}()
	return parser.Parse(e)
}

// Location returns the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// DST returns the schedule's daylight-saving policy.
func (s *Schedule) DST() DSTPolicy { return s.dst }

// Exprs returns the expressions the schedule was parsed from.
func (s *Schedule) Exprs() []string { return append([]string(nil), s.exprs...) }

// Next returns the first fire time strictly after t, in the schedule's
// zone, or the zero time if there is none within about five years.
// A fire time is the identity of a run: the same t gives the same answer
// on every node.
func (s *Schedule) Next(t time.Time) time.Time {
	var best time.Time
	consider := func(n time.Time) {
		if !n.IsZero() && (best.IsZero() || n.Before(best)) {
			best = n
		}
	}
	for _, w := range s.wall {
		consider(s.nextWall(w, t))
	}
	for _, d := range s.every {
		consider(nextEvery(d, t))
	}
	if best.IsZero() {
		return best
	}
	return best.In(s.loc)
}

// NextN returns the first n fire times after t.
func (s *Schedule) NextN(t time.Time, n int) []time.Time {
	var out []time.Time
	for range n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// nextEvery anchors an @every interval at the Unix epoch, so every leader
// computes the same fire times whenever it starts: the multiples of d
// since 1970-01-01T00:00:00Z. Daylight saving does not apply to it.
func nextEvery(d time.Duration, t time.Time) time.Time {
	n, step := t.UnixNano(), int64(d)
	k := n / step
	if n < 0 && n%step != 0 {
		k-- // floor division for times before 1970
	}
	return time.Unix(0, (k+1)*step)
}

// maxPeriods bounds the walk over a zone's offset periods in nextWall.
// robfig gives up after five years; zones change offset a few times a year.
const maxPeriods = 64

// nextWall returns the first instant strictly after t at which the
// wall-clock schedule w fires in s's zone, applying the DST policy.
//
// The zone's timeline is a run of periods of constant UTC offset
// (time.Time.ZoneBounds). Within one period wall time and instants map one
// to one. At a period's start the wall clock either jumped forward (a gap:
// wall times that never occur) or back (wall times that occur a second
// time). Walk the periods from the one holding t, and in each:
//   - gap before it, policy shift: if w fires inside the gap, fire once at
//     the period's start, the first instant after the gap;
//   - repeat before it, policy once: ignore the repeated wall times, they
//     fired in the previous period;
//   - otherwise the first wall candidate in the period's range wins.
func (s *Schedule) nextWall(w *cron.SpecSchedule, t time.Time) time.Time {
	t = t.In(s.loc)
	p := t
	for range maxPeriods {
		start, end := p.ZoneBounds()
		off := offset(p)
		var prevOff time.Duration
		hasPrev := !start.IsZero()
		if hasPrev {
			prevOff = offset(start.Add(-time.Nanosecond).In(s.loc))
		}
		entered := start.After(t) // this period begins after t

		// A spring-forward gap just before this period.
		if entered && hasPrev && prevOff < off && s.dst.Spring == SpringShift {
			gapFrom, gapTo := naive(start, prevOff), naive(start, off)
			if c := w.Next(gapFrom.Add(-time.Second)); !c.IsZero() && c.Before(gapTo) {
				return start
			}
		}

		// The first wall candidate after t that lies in this period.
		lo := naive(t, off)
		if entered {
			lo = laterOf(lo, naive(start, off).Add(-time.Second))
		}
		if hasPrev && prevOff > off && s.dst.Fall == FallOnce {
			lo = laterOf(lo, naive(start, prevOff).Add(-time.Second))
		}
		c := w.Next(lo)
		if c.IsZero() {
			return time.Time{}
		}
		if end.IsZero() || c.Before(naive(end, off)) {
			return c.Add(-off).In(s.loc)
		}
		p = end.In(s.loc)
	}
	return time.Time{}
}

// offset returns t's UTC offset in its location.
func offset(t time.Time) time.Duration {
	_, sec := t.Zone()
	return time.Duration(sec) * time.Second
}

// naive returns the wall-clock reading of instant t under offset off, as a
// UTC time.
func naive(t time.Time, off time.Duration) time.Time { return t.UTC().Add(off) }

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Package explain answers why a job did or did not fire at a time: from
// its spec (its schedules in its time zone, DST gaps and repeats included)
// and the runs the cluster recorded, it names each fire time's fate. It
// reads and decides nothing the cluster must agree on.
package explain

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Outcomes of one fire time, as Explain names them.
const (
	// FateRan: its run finished (succeeded, failed, fenced, ...).
	FateRan = "ran"
	// FateOpen: its run is pending or running.
	FateOpen = "open"
	// FateSkipped: recorded as skipped (overlap, misfire, catch-up window,
	// no worker), with the reason.
	FateSkipped = "skipped"
	// FatePaused: the job was paused then; a pause records nothing per
	// fire time.
	FatePaused = "paused"
	// FateNotFired: the schedule names the wall time but its
	// daylight-saving policy does not fire it (a gap under spring: skip,
	// the repeat under fall: once).
	FateNotFired = "not_fired"
	// FateFuture: not yet due.
	FateFuture = "future"
	// FateUnrecorded: due, but the cluster holds nothing about it.
	FateUnrecorded = "unrecorded"
)

// Explanation is the fate of one asked time of a job (GET
// /api/v1/jobs/{name}/explain?at=).
type Explanation struct {
	Job      string `json:"job"`
	Timezone string `json:"timezone"`
	// Asked is the time as asked.
	Asked string `json:"asked"`
	// FireTime says whether the asked time is (or, for a wall time, names)
	// one of the job's fire times.
	FireTime bool `json:"fire_time"`
	// DST explains a wall time in a daylight-saving gap or repeat, or a
	// fire time the policy moved or dropped.
	DST string `json:"dst,omitempty"`
	// Fates are the fates of the instants the asked time names (two for
	// a repeated wall time).
	Fates []Fate `json:"fates"`
	// Previous and Next are the nearest fire times around the asked time,
	// when it is none.
	Previous time.Time `json:"previous,omitzero"`
	Next     time.Time `json:"next,omitzero"`
}

// HasRun reports whether a fate names a recorded run: a fire time's, or
// one a trigger started at an instant the schedule never names.
func (ex Explanation) HasRun() bool {
	for _, f := range ex.Fates {
		if f.Run != nil {
			return true
		}
	}
	return false
}

// Fate is what became of one instant.
type Fate struct {
	At      time.Time       `json:"at"`
	Outcome string          `json:"outcome"`
	Reason  string          `json:"reason,omitempty"`
	Run     *jobs.Run       `json:"run,omitempty"`
	Skip    *jobs.SkipRange `json:"skip,omitempty"`
}

// ExplainInput is what Explain reads: the job, the asked time, and
// lookups into the replicated state and history.
type ExplainInput struct {
	Spec  jobs.Spec
	Asked string
	Now   time.Time
	// Run returns the recorded run of the job scheduled at, if any.
	Run func(at time.Time) (*jobs.Run, error)
	// Skips are the job's recorded skip ranges.
	Skips []jobs.SkipRange
	// PausedAt reports whether an operator's pause was in force at t:
	// the newest pause or resume of the job before t, if any is recorded
	// (known).
	PausedAt func(t time.Time) (paused, known bool, err error)
}

// ErrBadTime: the asked time is neither RFC 3339 nor a wall time.
var ErrBadTime = errors.New("want an RFC 3339 time such as 2026-03-29T02:30:00+01:00, or a wall time in the job's zone such as 2026-03-29T02:30")

// wallLayouts are the wall-time forms explain accepts, read in the job's
// zone.
var wallLayouts = []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04"}

// ParseAskedTime reads an asked time: RFC 3339, or the time of a run id
// (20260329T010000Z, so a run id pastes as JOB@TIME), names one instant;
// a wall time without an offset is a reading in the job's zone (instant
// false).
func ParseAskedTime(s string) (t time.Time, instant bool, err error) {
	for _, l := range []string{time.RFC3339Nano, "20060102T150405Z", "20060102T150405.000Z"} {
		if t, err := time.Parse(l, s); err == nil {
			return t, true, nil
		}
	}
	for _, l := range wallLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, false, nil
		}
	}
	return time.Time{}, false, fmt.Errorf("time %q: %w", s, ErrBadTime)
}

// Explain says what became of the job's fire time(s) at the asked time:
// a pure reading of what it is given, so a test can call it.
func Explain(in ExplainInput) (Explanation, error) {
	spec := in.Spec
	ex := Explanation{Job: spec.Name, Timezone: spec.Timezone, Asked: in.Asked, Fates: []Fate{}}
	if ex.Timezone == "" {
		ex.Timezone = "UTC"
	}
	sched, err := spec.Schedule()
	if err != nil {
		return ex, fmt.Errorf("job %s: %w", spec.Name, err)
	}
	loc := sched.Location()
	asked, instant, err := ParseAskedTime(in.Asked)
	if err != nil {
		return ex, err
	}
	dst := sched.DST()
	clock := func(t time.Time) string { return t.Format("15:04") }
	day := asked.Format("2006-01-02")

	var candidates []time.Time
	if instant {
		candidates = []time.Time{asked.In(loc)}
		// An instant that is the repeat of a wall time the policy fires
		// once: say so.
		w := naiveOf(asked.In(loc))
		if r := jobs.ResolveWall(w, loc); len(r.Instants) == 2 && sched.MatchesWall(w) && !sched.IsFireTime(asked) && asked.Equal(r.Instants[1]) {
			ex.DST = fmt.Sprintf("%s occurs twice in %s on %s; dst.fall: once fires only the first (%s)", clock(w), ex.Timezone, w.Format("2006-01-02"), stamp(r.Instants[0]))
			ex.Fates = append(ex.Fates, Fate{At: asked.In(loc), Outcome: FateNotFired, Reason: "the repeated hour of a fall-back (dst.fall: once)"})
			ex.FireTime = false
			ex.Previous, ex.Next = sched.Prev(asked), sched.Next(asked)
			return ex, nil
		}
	} else {
		r := jobs.ResolveWall(asked, loc)
		switch {
		case len(r.Instants) == 0 && !r.Jump.IsZero():
			jump := fmt.Sprintf("%s does not exist in %s on %s: the clocks jump from %s to %s at %s", clock(asked), ex.Timezone, day, clock(r.From), clock(r.To), r.Jump.UTC().Format(time.RFC3339))
			switch {
			case !sched.MatchesWall(asked):
				ex.DST = jump
			case dst.Spring == jobs.SpringShift && sched.IsFireTime(r.Jump):
				ex.DST = jump + fmt.Sprintf("; dst.spring: shift fires it once at the end of the gap, %s", stamp(r.Jump.In(loc)))
				candidates = []time.Time{r.Jump.In(loc)}
			default:
				ex.DST = jump + "; dst.spring: skip does not fire it that day"
				ex.Fates = append(ex.Fates, Fate{At: r.Jump.In(loc), Outcome: FateNotFired, Reason: "in a spring-forward gap (dst.spring: skip)"})
			}
			if len(candidates) == 0 {
				ex.Previous, ex.Next = sched.Prev(r.Jump), sched.Next(r.Jump.Add(-time.Nanosecond))
				return ex, nil
			}
		case len(r.Instants) == 2:
			ex.DST = fmt.Sprintf("%s occurs twice in %s on %s (%s and %s)", clock(asked), ex.Timezone, day, stamp(r.Instants[0]), stamp(r.Instants[1]))
			if sched.MatchesWall(asked) {
				ex.DST += "; dst." + "fall: " + dst.Fall
			}
			candidates = r.Instants
		default:
			candidates = r.Instants
		}
	}

	for _, at := range candidates {
		if !sched.IsFireTime(at) {
			if len(candidates) == 2 && sched.MatchesWall(naiveOf(at)) {
				ex.Fates = append(ex.Fates, Fate{At: at, Outcome: FateNotFired, Reason: "the repeated hour of a fall-back (dst.fall: once)"})
				continue
			}
			// A run id pasted as JOB@TIME names its run whatever started
			// it: a trigger, a backfill, a dependency.
			if !instant {
				continue
			}
			run, err := in.Run(at)
			if err != nil {
				return ex, err
			}
			if run != nil {
				f := fateOfRun(at, run)
				trigger := run.Trigger
				if trigger == "" {
					trigger = "recorded"
				}
				f.Reason = fmt.Sprintf("a %s run, not a fire time of the schedule: %s", trigger, f.Reason)
				ex.Fates = append(ex.Fates, f)
			}
			continue
		}
		ex.FireTime = true
		f, err := fateOf(in, at)
		if err != nil {
			return ex, err
		}
		ex.Fates = append(ex.Fates, f)
	}
	if !ex.FireTime {
		ref := candidates[0]
		ex.Previous, ex.Next = sched.Prev(ref), sched.Next(ref)
	}
	return ex, nil
}

// fateOf is what became of fire time at.
func fateOf(in ExplainInput, at time.Time) (Fate, error) {
	f := Fate{At: at}
	run, err := in.Run(at)
	if err != nil {
		return f, err
	}
	if run != nil {
		return fateOfRun(at, run), nil
	}
	for _, s := range in.Skips {
		if !at.Before(s.From) && !at.After(s.To) {
			f.Outcome, f.Reason, f.Skip = FateSkipped, s.Reason, &s
			if s.Count > 1 {
				f.Reason += fmt.Sprintf(" (one of %d fire times from %s to %s)", s.Count, stamp(s.From), stamp(s.To))
			}
			return f, nil
		}
	}
	if at.After(in.Now) {
		f.Outcome = FateFuture
		if in.Spec.Paused {
			f.Reason = "the job is paused: it will not run unless resumed by then"
		}
		return f, nil
	}
	paused, known, err := in.PausedAt(at)
	if err != nil {
		return f, err
	}
	// No pause or resume recorded before it: paused now means paused
	// then (paused in the file, or the record of the pause is gone).
	if paused || !known && in.Spec.Paused {
		f.Outcome, f.Reason = FatePaused, "the job was paused (a pause records nothing per fire time)"
		return f, nil
	}
	f.Outcome = FateUnrecorded
	f.Reason = "no run or skip is recorded: it was dropped by retention, the job was not in the set then, or no leader has reached it yet"
	return f, nil
}

// fateOfRun is the fate of the instant at whose recorded run is run.
func fateOfRun(at time.Time, run *jobs.Run) Fate {
	f := Fate{At: at, Run: run}
	switch {
	case run.State == jobs.Skipped:
		f.Outcome, f.Reason = FateSkipped, run.Reason
	case !run.State.Terminal():
		f.Outcome, f.Reason = FateOpen, string(run.State)
	default:
		f.Outcome, f.Reason = FateRan, ranReason(*run)
	}
	return f
}

func ranReason(r jobs.Run) string {
	a, ok := r.Latest()
	if !ok {
		return string(r.State)
	}
	parts := []string{fmt.Sprintf("%s after %d attempt(s)", r.State, len(r.Attempts))}
	if a.Error != "" {
		parts = append(parts, a.Error)
	}
	if r.Reason != "" {
		parts = append(parts, r.Reason)
	}
	return strings.Join(parts, "; ")
}

// naiveOf is t's wall-clock reading as a naive (UTC) time.
func naiveOf(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// stamp shows an instant in its zone with its offset.
func stamp(t time.Time) string { return t.Format("2006-01-02 15:04:05 MST (-07:00)") }

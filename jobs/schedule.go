package jobs

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// parser accepts 5 or 6 fields (seconds optional) and @descriptors.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule computes a job's fire times. robfig/cron parses the expressions
// and steps through candidate times; the firing loop is ours.
type Schedule struct {
	loc   *time.Location
	specs []cron.Schedule
}

// ParseSchedule parses one or several cron expressions, evaluated in the
// time zone tz ("" means UTC).
func ParseSchedule(exprs []string, tz string) (*Schedule, error) {
	if len(exprs) == 0 {
		return nil, fmt.Errorf("no schedule")
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("time zone %q: %w", tz, err)
		}
		loc = l
	}
	s := &Schedule{loc: loc}
	for _, e := range exprs {
		c, err := parser.Parse(e)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", e, err)
		}
		if spec, ok := c.(*cron.SpecSchedule); ok {
			spec.Location = loc
		}
		s.specs = append(s.specs, c)
	}
	return s, nil
}

// Next returns the first fire time strictly after t, or the zero time if
// there is none.
func (s *Schedule) Next(t time.Time) time.Time {
	var best time.Time
	for _, c := range s.specs {
		n := c.Next(t.In(s.loc))
		if n.IsZero() {
			continue
		}
		if best.IsZero() || n.Before(best) {
			best = n
		}
	}
	return best
}

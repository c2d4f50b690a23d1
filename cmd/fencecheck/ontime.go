package main

import (
	"maps"
	"slices"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// CheckNotEarly is the promise of granting ahead (scheduler/fsm/pregrant.go):
// a scheduled run may be granted, dispatched and established before its
// fire time, but its process starts no earlier than that.
const CheckNotEarly = "no process started before its fire time"

// checkNotEarly: every attempt of a scheduled run that started its
// process started it at or after the run's fire time (its scheduled time
// plus the job's jitter). Nodes and this harness share one host, so one
// clock; the recorded times are the worker's.
func checkNotEarly(o *Observation, r *results) {
	specs := map[string]jobs.Spec{}
	for _, s := range o.Jobs {
		specs[s.Name] = s
	}
	for _, id := range slices.Sorted(maps.Keys(o.Runs)) {
		run := o.Runs[id]
		spec, ok := specs[run.Job]
		if run.Trigger != "schedule" || !ok {
			continue
		}
		fireAt := run.ScheduledAt.Add(spec.JitterFor(run.ScheduledAt))
		for _, a := range run.Attempts {
			if a.StartedAt.IsZero() {
				continue
			}
			r.checked(CheckNotEarly, 1)
			if a.StartedAt.Before(fireAt) {
				r.fail(CheckNotEarly, "attempt %s started its process at %s, %s before the fire time %s", a.ID, a.StartedAt.Format(timeFmt), fireAt.Sub(a.StartedAt).Round(time.Millisecond), fireAt.Format(timeFmt))
			}
		}
	}
}

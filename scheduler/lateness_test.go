package scheduler

import (
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

func TestIsCatchup(t *testing.T) {
	at := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	a := func(trigger string, n int, granted time.Duration) worker.Assignment {
		return worker.Assignment{Run: jobs.Run{Job: "j", ScheduledAt: at, Trigger: trigger}, Attempt: jobs.Attempt{Number: n, GrantedAt: at.Add(granted)}, Spec: jobs.Spec{Name: "j"}}
	}
	for _, tc := range []struct {
		a    worker.Assignment
		want bool
	}{
		{a("schedule", 1, 10*time.Millisecond), false},
		{a("schedule", 1, jobs.MisfireGrace+time.Millisecond), true},
		{a("schedule", 1, time.Hour), true},
		{a("schedule", 2, time.Hour), false}, // a retry: late by its backoff
		{a("manual", 1, time.Hour), false},
	} {
		if got := worker.IsCatchup(tc.a); got != tc.want {
			t.Errorf("IsCatchup(%s attempt %d granted %s after) = %v, want %v", tc.a.Run.Trigger, tc.a.Attempt.Number, tc.a.Attempt.GrantedAt.Sub(at), got, tc.want)
		}
	}
	// Jitter moves the fire time the grant is measured from.
	j := a("schedule", 1, 5*time.Second)
	j.Spec.Jitter = jobs.Duration(time.Minute)
	if worker.IsCatchup(j) != (5*time.Second-j.Spec.JitterFor(at) > jobs.MisfireGrace) {
		t.Error("jitter not taken into account")
	}
}

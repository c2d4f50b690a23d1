package worker

import (
	"time"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Observer sees what happens to attempts on one worker: the node-local
// facts that the replicated state does not record (renewal latency, how
// late a process started, lease transitions as this worker saw them).
// Metrics implement it. Every method is called from the worker's own
// goroutines, concurrently, and must return quickly without blocking.
type Observer interface {
	// AttemptStarted is called once an attempt's lease was confirmed and
	// its process started (its exec succeeded, or failed: started is then
	// when it failed); scheduled is the run's scheduled time.
	AttemptStarted(job string, scheduled, started time.Time)
	// AttemptFinished is called once per attempt this worker accepted, with
	// what it will report: a Completion whose StartedAt is zero never got
	// its lease confirmed or was fenced before it started.
	AttemptFinished(job string, c replicated.Completion)
	// LeaseRenewed is called after every renewal call with its latency and
	// its error (nil when the leader answered, whatever it answered).
	LeaseRenewed(latency time.Duration, err error)
	// LeaseTransition is called when an attempt's lease moves to SUSPECT or
	// LOST (jobs.EventSuspect or jobs.EventLost).
	LeaseTransition(kind string)
}

// NopObserver observes nothing.
type NopObserver struct{}

// AttemptStarted implements Observer.
func (NopObserver) AttemptStarted(string, time.Time, time.Time) {}

// AttemptFinished implements Observer.
func (NopObserver) AttemptFinished(string, replicated.Completion) {}

// LeaseRenewed implements Observer.
func (NopObserver) LeaseRenewed(time.Duration, error) {}

// LeaseTransition implements Observer.
func (NopObserver) LeaseTransition(string) {}

var _ Observer = NopObserver{}

// observer returns the worker's Observer, or a no-op one.
func (w *Worker) observer() Observer {
	if w.Observer == nil {
		return NopObserver{}
	}
	return w.Observer
}

// jobOf names the job of an assignment.
func jobOf(a Assignment) string {
	if a.Run.Job != "" {
		return a.Run.Job
	}
	return a.Spec.Name
}

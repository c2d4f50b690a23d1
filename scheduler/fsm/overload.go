package fsm

import "github.com/fencecron/fencecron/jobs"

// Overload returns the cluster's overload as the log tells it (jobs.Overload).
func (f *FSM) Overload() jobs.Overload {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.overload
}

package fsm

import (
	"slices"

	"github.com/fencecron/fencecron/jobs"
)

// AppliedJobSet returns a copy of the job set as it was applied (each
// spec's Paused flag as its file said), and the jobs paused by an
// operator on top of it, which an apply keeps paused: what a dry run of
// apply compares a file with.
func (f *FSM) AppliedJobSet() (specs []jobs.Spec, operatorPaused []string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	specs = slices.Clone(f.st.Jobs)
	for name, p := range f.st.Paused {
		if p {
			operatorPaused = append(operatorPaused, name)
		}
	}
	slices.Sort(operatorPaused)
	return specs, operatorPaused
}

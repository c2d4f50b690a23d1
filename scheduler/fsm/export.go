package fsm

import (
	"slices"

	"github.com/fencecron/fencecron/jobs"
)

// JobSetExport is the replicated job set as one applied entry left it,
// for writing out whole (GET /api/v1/jobset) without a copy of it per
// request.
type JobSetExport struct {
	Info JobSetInfo
	// Jobs is the set as applied (each spec's Paused as its file said).
	// It is the FSM's own slice: an apply replaces the slice and never
	// changes it in place (Snapshot relies on that too), so it may be
	// read after the call, while entries apply. It must not be written.
	Jobs []*jobs.Spec
	// OperatorPaused are the jobs paused by pause on top of the set, in
	// name order.
	OperatorPaused []string
}

// ExportJobSet returns the job set for an export: its summary, the set
// itself (shared, read-only: see JobSetExport) and the jobs an operator
// paused, all as of the same applied entry.
func (f *FSM) ExportJobSet() JobSetExport {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e := JobSetExport{Info: f.jobSetInfo(), Jobs: f.st.Jobs}
	for name, p := range f.st.Paused {
		if p {
			e.OperatorPaused = append(e.OperatorPaused, name)
		}
	}
	slices.Sort(e.OperatorPaused)
	return e
}

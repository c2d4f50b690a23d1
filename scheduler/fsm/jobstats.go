package fsm

import (
	"maps"
	"slices"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// stats returns job's figures, creating them.
func (f *FSM) stats(job string) *replicated.JobStats {
	if f.st.JobStats == nil {
		f.st.JobStats = map[string]*replicated.JobStats{}
	}
	s := f.st.JobStats[job]
	if s == nil {
		s = &replicated.JobStats{}
		f.st.JobStats[job] = s
	}
	if s.Runs == nil {
		// A snapshot may hold figures without runs ({} or "runs": null).
		s.Runs = map[jobs.State]uint64{}
	}
	return s
}

// runFinished counts a run that has just reached a final state (was is
// its state before): settle calls it, and a grant that skips.
func (f *FSM) runFinished(was jobs.State, r *jobs.Run) {
	if was.Terminal() || !r.State.Terminal() {
		return
	}
	s := f.stats(r.Job)
	s.Runs[r.State]++
	if a, ok := r.Latest(); ok && r.State == jobs.Succeeded && a.EndedAt.After(s.LastSuccess) {
		s.LastSuccess = a.EndedAt
	}
}

// firesSkipped counts fire times of job recorded as skipped as a range.
func (f *FSM) firesSkipped(job string, n int) {
	if n > 0 {
		f.stats(job).Runs[jobs.Skipped] += uint64(n)
	}
}

// pruneJobStats drops the figures of jobs no longer in the set.
func (f *FSM) pruneJobStats() {
	for job := range f.st.JobStats {
		if _, ok := f.spec(job); !ok {
			delete(f.st.JobStats, job)
		}
	}
}

// JobStatsPage returns, for up to limit jobs in name order, the figures of
// the jobs that have any, and how many more jobs have some.
func (f *FSM) JobStatsPage(limit int) (page map[string]replicated.JobStats, more int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	names := slices.Sorted(maps.Keys(f.st.JobStats))
	if len(names) > limit {
		more = len(names) - limit
		names = names[:limit]
	}
	page = make(map[string]replicated.JobStats, len(names))
	for _, n := range names {
		s := f.st.JobStats[n]
		page[n] = replicated.JobStats{Runs: maps.Clone(s.Runs), LastSuccess: s.LastSuccess}
	}
	return page, more
}

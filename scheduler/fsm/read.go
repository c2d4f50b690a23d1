package fsm

import (
	"maps"
	"slices"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Epoch returns the term of the last leader whose election entry was
// applied, and that leader's node id.
func (f *FSM) Epoch() (uint64, string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.Epoch, f.st.Leader
}

// Elected returns the epoch and log index of the last applied election
// entry.
func (f *FSM) Elected() (epoch, index uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.Epoch, f.st.ElectedIndex
}

// LastIndex returns the index of the last applied entry.
func (f *FSM) LastIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.LastIndex
}

// JobSetInfo says which job set the cluster runs.
type JobSetInfo struct {
	Hash      string    `json:"hash"`
	Source    string    `json:"source"`
	AppliedAt time.Time `json:"applied_at"`
	Count     int       `json:"count"`
	// Paused counts the jobs paused, by their spec or by pause.
	Paused int `json:"paused"`
	// First is the set's first job as written ("" if none): what a page
	// that shows one job shows by default.
	First string `json:"first,omitempty"`
}

// JobSet returns a copy of the replicated job set, each spec's Paused
// flag reflecting pause and resume, where it came from and when, and
// whether one was ever applied. It copies the whole set: what serves
// requests pages through FindJobs or looks one job up with Spec instead.
func (f *FSM) JobSet() (specs []jobs.Spec, source string, at time.Time, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	specs = jobs.Values(f.st.Jobs)
	for i := range specs {
		specs[i].Paused = specs[i].Paused || f.st.Paused[specs[i].Name]
	}
	return specs, f.st.JobsFrom, f.st.JobsAt, f.st.HasJobs
}

// Spec returns one job of the replicated set, its Paused flag reflecting
// pause and resume.
func (f *FSM) Spec(name string) (jobs.Spec, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s, ok := f.spec(name)
	if !ok {
		return jobs.Spec{}, false
	}
	return f.withPause(s), true
}

// JobSetInfo describes the replicated job set; Hash is "" if none was
// ever applied.
func (f *FSM) JobSetInfo() JobSetInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.jobSetInfo()
}

// jobSetInfo is JobSetInfo, under f.mu.
func (f *FSM) jobSetInfo() JobSetInfo {
	info := JobSetInfo{Hash: f.st.JobsHash, Source: f.st.JobsFrom, AppliedAt: f.st.JobsAt, Count: len(f.st.Jobs), Paused: f.pausedCount()}
	if len(f.st.Jobs) > 0 {
		info.First = f.st.Jobs[0].Name
	}
	return info
}

// RunFilter selects runs.
type RunFilter struct {
	Job   string
	Limit int // 0: all
}

// Runs returns runs, newest grant first. Asked for one job's, it looks
// at that job's runs only.
func (f *FSM) Runs(filter RunFilter) []jobs.Run {
	f.mu.RLock()
	defer f.mu.RUnlock()
	order := f.st.Order
	if filter.Job != "" {
		order = f.idx.runs[filter.Job]
	}
	var out []jobs.Run
	for i := len(order) - 1; i >= 0; i-- {
		r := f.st.Runs[order[i]]
		out = append(out, r.Clone())
		if filter.Limit > 0 && len(out) == filter.Limit {
			break
		}
	}
	return out
}

// Run returns one run by id.
func (f *FSM) Run(id string) (jobs.Run, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.st.Runs[id]
	if !ok {
		return jobs.Run{}, false
	}
	return r.Clone(), true
}

// LastRun returns the newest run of a job: the run itself while the
// state keeps it, else its summary (RunSummary: its newest attempt only).
func (f *FSM) LastRun(job string) (jobs.Run, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.lastRun(job)
}

// OpenRuns returns the runs of a job ("" for all jobs) that have not
// finished, oldest first.
func (f *FSM) OpenRuns(job string) []jobs.Run {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []jobs.Run
	for _, id := range f.st.Order {
		if r := f.st.Runs[id]; (job == "" || r.Job == job) && !r.State.Terminal() {
			out = append(out, r.Clone())
		}
	}
	return out
}

// OpenLoadByWorker sums, per worker, the load (jobs.Spec.AttemptLoad) of
// the runs whose latest attempt is still open: the leader's measure.
func (f *FSM) OpenLoadByWorker() map[string]int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	load := map[string]int{}
	for _, id := range f.st.Order {
		r := f.st.Runs[id]
		if a, ok := r.Latest(); ok && !a.State.Terminal() {
			w := jobs.ProcessLoad // a job gone from the set: a process
			if i, ok := f.idx.byName[r.Job]; ok {
				w = f.st.Jobs[i].AttemptLoad() // in place: no copy of the spec per run
			}
			load[a.Worker] += w
		}
	}
	return load
}

// Events returns the audit trail after seq (0: from the oldest kept), up
// to limit entries (0: all), oldest first.
func (f *FSM) Events(after uint64, limit int) []jobs.Event {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(f.st.Events, after+1, func(e jobs.Event, seq uint64) int {
		switch {
		case e.Seq < seq:
			return -1
		case e.Seq > seq:
			return 1
		}
		return 0
	})
	out := slices.Clone(f.st.Events[i:])
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// Skips returns the recorded skip ranges of a job ("" for all).
func (f *FSM) Skips(job string) []jobs.SkipRange {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []jobs.SkipRange
	for _, s := range f.st.Skips {
		if job == "" || s.Job == job {
			out = append(out, s)
		}
	}
	return out
}

// Counters returns the cluster's lifetime counters (grants, expiries,
// fenced, stale_refused, elections, ...).
func (f *FSM) Counters() map[string]uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return maps.Clone(f.st.Counters)
}

// LastScheduled returns the latest scheduled time granted or skipped for
// a job.
func (f *FSM) LastScheduled(job string) (time.Time, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.st.LastScheduled[job]
	return t, ok
}

// GrantedThrough returns, per job, the latest scheduled time granted or
// skipped, or dropped from the state with its run: nothing at or before
// it may be granted again (see RestoreFloor).
func (f *FSM) GrantedThrough() map[string]time.Time {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]time.Time, len(f.st.LastScheduled))
	for job, at := range f.st.LastScheduled {
		out[job] = at
	}
	for job, at := range f.st.Horizon {
		if at.After(out[job]) {
			out[job] = at
		}
	}
	return out
}

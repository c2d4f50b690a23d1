package fsm

import (
	"cmp"
	"slices"
	"strings"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A job set may hold 100,000 jobs. Everything the leader does per fire
// time, and everything a page or an API call does per request, must then
// cost O(log n) or O(page), never a scan or a copy of the whole set. The
// jobIndex is how: derived from the replicated state (never in a
// snapshot), rebuilt whenever the job set is replaced or a snapshot is
// restored, and kept in step with runs as grants are applied and runs are
// dropped.

// jobIndex is the FSM's lookup structure over st.Jobs and st.Runs. It is
// read and written with f.mu held, like the state it indexes.
type jobIndex struct {
	// byName is each job's position in st.Jobs. It is replaced whole,
	// never changed in place (JobSetBase.Diff reads it outside the lock).
	byName map[string]int
	// sorted are the positions in st.Jobs in name order: the order pages
	// and cursors walk.
	sorted []int
	// specPaused counts the specs paused in the spec itself.
	specPaused   int
	allScheduled bool // every job of the set has a last scheduled time
	// runs are, per job, the ids of its runs in st.Runs, oldest grant
	// first (the order of st.Order).
	runs map[string][]string
}

// indexJobs rebuilds the job half of the index after st.Jobs changed;
// with sameNames (the set's names where they were: jobs changed in
// place), the positions by name and in name order stand, which spares a
// sort of 100,000 names per one-job change.
func (f *FSM) indexJobs(sameNames bool) {
	// Rebuilt from the set as it is now, in its order: a set applied again
	// in another order has the same hash, and a replica that restored it
	// from a snapshot lists followers in the new order.
	f.deps = nil
	ix := &f.idx
	ix.specPaused = 0
	for i := range f.st.Jobs {
		if f.st.Jobs[i].Paused {
			ix.specPaused++
		}
	}
	if sameNames {
		return
	}
	ix.byName, ix.sorted = make(map[string]int, len(f.st.Jobs)), make([]int, len(f.st.Jobs))
	for i := range f.st.Jobs {
		ix.byName[f.st.Jobs[i].Name], ix.sorted[i] = i, i
	}
	slices.SortFunc(ix.sorted, func(a, b int) int { return strings.Compare(f.st.Jobs[a].Name, f.st.Jobs[b].Name) })
}

// indexRuns rebuilds the run half of the index from st.Order. A job with
// runs but no summary (a snapshot older than summaries) gets one from its
// newest run.
func (f *FSM) indexRuns() {
	f.idx.runs = map[string][]string{}
	for _, id := range f.st.Order {
		r := f.st.Runs[id]
		f.idx.runs[r.Job] = append(f.idx.runs[r.Job], id)
	}
	for job, ids := range f.idx.runs {
		if _, ok := f.st.LastRuns[job]; !ok {
			f.st.LastRuns[job] = replicated.SummaryOf(f.st.Runs[ids[len(ids)-1]])
		}
	}
}

// addRun indexes a run just granted or skipped: it is its job's newest.
func (f *FSM) addRun(r *jobs.Run) {
	if f.idx.runs == nil {
		f.idx.runs = map[string][]string{}
	}
	f.idx.runs[r.Job] = append(f.idx.runs[r.Job], r.ID)
	f.st.LastRuns[r.Job] = replicated.SummaryOf(r)
}

// dropRun forgets a run about to be removed from st.Runs; if it was its
// job's newest, the job's summary takes its final state.
func (f *FSM) dropRun(r *jobs.Run) {
	ids := f.idx.runs[r.Job]
	switch i := slices.Index(ids, r.ID); {
	case i == 0:
		// Runs are dropped oldest first: without a copy each time, a job
		// with many runs is trimmed in linear time.
		ids = ids[1:]
	case i > 0:
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(f.idx.runs, r.Job)
	} else {
		f.idx.runs[r.Job] = ids
	}
	if s, ok := f.st.LastRuns[r.Job]; ok && s.ID == r.ID {
		f.st.LastRuns[r.Job] = replicated.SummaryOf(r)
	}
}

// lastRun returns a job's newest run: the run itself while the state
// keeps it, else its summary.
func (f *FSM) lastRun(job string) (jobs.Run, bool) {
	s, ok := f.st.LastRuns[job]
	if !ok {
		return jobs.Run{}, false
	}
	if r, ok := f.st.Runs[s.ID]; ok {
		return r.Clone(), true
	}
	return s.Run(job), true
}

// lastState is the state of a job's newest run, without copying it;
// false if the job never ran.
func (f *FSM) lastState(job string) (jobs.State, bool) {
	s, ok := f.st.LastRuns[job]
	if !ok {
		return "", false
	}
	if r, ok := f.st.Runs[s.ID]; ok {
		return r.State, true
	}
	return s.State, true
}

// withPause returns s with its Paused flag reflecting pause and resume.
func (f *FSM) withPause(s jobs.Spec) jobs.Spec {
	s.Paused = s.Paused || f.st.Paused[s.Name]
	return s
}

// pausedCount counts the jobs of the set that are paused, by their spec
// or by pause.
func (f *FSM) pausedCount() int {
	n := f.idx.specPaused
	for name := range f.st.Paused {
		if i, ok := f.idx.byName[name]; ok && !f.st.Jobs[i].Paused {
			n++
		}
	}
	return n
}

// FindJobs returns one page of the jobs matching q, in name order. It
// copies only the page; finding where a cursor resumes is a binary
// search, and counting the matches one pass over the set without copying
// it.
func (f *FSM) FindJobs(q jobs.Query) jobs.Page {
	f.mu.RLock()
	defer f.mu.RUnlock()
	text := q.SearchText()
	sorted := f.idx.sorted
	start := 0
	if q.After != "" {
		start, _ = slices.BinarySearchFunc(sorted, q.After, func(i int, name string) int {
			return cmp.Compare(f.st.Jobs[i].Name, name)
		})
		if start < len(sorted) && f.st.Jobs[sorted[start]].Name == q.After {
			start++
		}
	}
	page := jobs.Page{Total: len(f.st.Jobs)}
	filtered := q.Filtered()
	if !filtered {
		page.Matched = len(sorted)
	}
	for n, i := range sorted {
		s := f.st.Jobs[i]
		if filtered && !q.Matches(s, s.Paused || f.st.Paused[s.Name], func() (jobs.State, bool) { return f.lastState(s.Name) }, text) {
			continue
		}
		if filtered {
			page.Matched++
		}
		if n < start {
			continue
		}
		if q.Limit > 0 && len(page.Jobs) == q.Limit {
			page.More = true
			if !filtered {
				break
			}
			continue
		}
		e := jobs.Listed{Spec: f.withPause(*s)}
		if r, ok := f.lastRun(s.Name); ok {
			e.LastRun = &r
		}
		page.Jobs = append(page.Jobs, e)
	}
	return page
}

package scheduler

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
)

// DefaultMaxRuns bounds how many runs the replicated state keeps.
const DefaultMaxRuns = 2000

// Command ops.
const (
	opElected  = "elected"
	opSetJobs  = "set_jobs"
	opGrant    = "grant"
	opSkip     = "skip"
	opStart    = "start"
	opComplete = "complete"
)

// command is one entry of the replicated log. Exactly one payload is set.
type command struct {
	Op       string      `json:"op"`
	Elected  *electedCmd `json:"elected,omitempty"`
	SetJobs  *setJobsCmd `json:"set_jobs,omitempty"`
	Grant    *grantCmd   `json:"grant,omitempty"`
	Start    *startCmd   `json:"start,omitempty"`
	Complete *Completion `json:"complete,omitempty"`
}

// electedCmd is the first entry a new leader commits; applying it is how
// every replica learns the epoch from the log itself.
type electedCmd struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
}

type setJobsCmd struct {
	Jobs   []jobs.Spec `json:"jobs"`
	Source string      `json:"source"`
	At     time.Time   `json:"at"`
}

// grantCmd grants the first attempt of a new run (opGrant), or records the
// run as skipped with Reason (opSkip).
type grantCmd struct {
	Job         string    `json:"job"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Output      string    `json:"output,omitempty"`
	Worker      string    `json:"worker,omitempty"`
	Trigger     string    `json:"trigger"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
}

type startCmd struct {
	Attempt string    `json:"attempt"`
	At      time.Time `json:"at"`
}

// Completion is what a worker reports when an attempt ends. Reporting the
// same completion twice is harmless.
type Completion struct {
	Attempt      string     `json:"attempt"`
	State        jobs.State `json:"state"`
	ExitCode     *int       `json:"exit_code,omitempty"`
	Signal       string     `json:"signal,omitempty"`
	StoreOutcome string     `json:"store_outcome,omitempty"`
	StoreVersion uint64     `json:"store_version,omitempty"`
	Error        string     `json:"error,omitempty"`
	StderrTail   string     `json:"stderr_tail,omitempty"`
	StartedAt    time.Time  `json:"started_at,omitzero"`
	EndedAt      time.Time  `json:"ended_at"`
}

// applyResult is what FSM.Apply returns to the proposer.
type applyResult struct {
	Run jobs.Run
	Err error
}

// state is the replicated state; it is what snapshots hold.
type state struct {
	Epoch     uint64               `json:"epoch"`
	Leader    string               `json:"leader"`
	ElectedAt time.Time            `json:"elected_at"`
	Jobs      []jobs.Spec          `json:"jobs"`
	JobsFrom  string               `json:"jobs_from"`
	JobsAt    time.Time            `json:"jobs_at"`
	JobsHash  string               `json:"jobs_hash"`
	HasJobs   bool                 `json:"has_jobs"`
	Runs      map[string]*jobs.Run `json:"runs"`
	// Order lists run ids oldest grant first.
	Order []string `json:"order"`
	// Horizon is, per job, the latest scheduled time of a run dropped to
	// keep the state bounded; nothing at or before it can be granted again.
	Horizon map[string]time.Time `json:"horizon"`
	// LastIndex is the index of the last applied entry.
	LastIndex uint64 `json:"last_index"`
}

// FSM is the scheduler's replicated state machine. It is the only place
// fence tokens are minted: from the term and index of the grant's own log
// entry.
type FSM struct {
	// MaxRuns bounds the runs kept (default DefaultMaxRuns).
	MaxRuns int

	mu          sync.RWMutex
	st          state
	jobsChanged chan struct{}
	applied     chan struct{}
}

// NewFSM returns an empty FSM.
func NewFSM() *FSM {
	return &FSM{
		MaxRuns:     DefaultMaxRuns,
		st:          emptyState(),
		jobsChanged: make(chan struct{}, 1),
		applied:     make(chan struct{}, 1),
	}
}

func emptyState() state {
	return state{Runs: map[string]*jobs.Run{}, Horizon: map[string]time.Time{}}
}

var _ raft.FSM = (*FSM)(nil)

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return applyResult{Err: fmt.Errorf("decode command at %d: %w", l.Index, err)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.LastIndex = l.Index
	defer notify(f.applied)
	switch c.Op {
	case opElected:
		f.st.Epoch, f.st.Leader, f.st.ElectedAt = l.Term, c.Elected.Node, c.Elected.At
		return applyResult{}
	case opSetJobs:
		f.st.Jobs, f.st.JobsFrom, f.st.JobsAt, f.st.HasJobs = c.SetJobs.Jobs, c.SetJobs.Source, c.SetJobs.At, true
		f.st.JobsHash = jobs.HashSpecs(c.SetJobs.Jobs)
		notify(f.jobsChanged)
		return applyResult{}
	case opGrant, opSkip:
		return f.applyGrant(l, c.Op, c.Grant)
	case opStart:
		return f.applyStart(c.Start)
	case opComplete:
		return f.applyComplete(c.Complete)
	}
	return applyResult{Err: fmt.Errorf("unknown command %q at %d", c.Op, l.Index)}
}

func (f *FSM) applyGrant(l *raft.Log, op string, g *grantCmd) applyResult {
	if !slices.ContainsFunc(f.st.Jobs, func(s jobs.Spec) bool { return s.Name == g.Job }) {
		return applyResult{Err: fmt.Errorf("grant %s: %w", g.Job, jobs.ErrUnknownJob)}
	}
	id := jobs.RunID(g.Job, g.ScheduledAt)
	if r, ok := f.st.Runs[id]; ok {
		return applyResult{Run: r.Clone(), Err: fmt.Errorf("grant %s: %w", id, jobs.ErrDuplicateRun)}
	}
	if h, ok := f.st.Horizon[g.Job]; ok && !g.ScheduledAt.After(h) {
		return applyResult{Err: fmt.Errorf("grant %s: at or before the retained horizon %s: %w", id, h.Format(time.RFC3339), jobs.ErrDuplicateRun)}
	}
	r := &jobs.Run{ID: id, Job: g.Job, ScheduledAt: g.ScheduledAt, Output: g.Output, Trigger: g.Trigger}
	if op == opSkip {
		r.State, r.Reason = jobs.Skipped, g.Reason
	} else {
		r.State = jobs.Pending
		r.Attempts = []jobs.Attempt{{
			ID:        jobs.AttemptID(id, 1),
			Number:    1,
			Token:     jobs.Fence{Epoch: l.Term, Seq: l.Index},
			Worker:    g.Worker,
			State:     jobs.Pending,
			GrantedAt: g.At,
		}}
	}
	f.st.Runs[id] = r
	f.st.Order = append(f.st.Order, id)
	f.trim()
	return applyResult{Run: r.Clone()}
}

// trim drops the oldest finished runs beyond MaxRuns, moving each job's
// horizon forward so a dropped (job, scheduled time) stays ungrantable.
func (f *FSM) trim() {
	limit := f.MaxRuns
	if limit <= 0 {
		limit = DefaultMaxRuns
	}
	drop := 0
	for len(f.st.Order)-drop > limit {
		r := f.st.Runs[f.st.Order[drop]]
		if !r.State.Terminal() {
			break
		}
		if r.ScheduledAt.After(f.st.Horizon[r.Job]) {
			f.st.Horizon[r.Job] = r.ScheduledAt
		}
		delete(f.st.Runs, r.ID)
		drop++
	}
	f.st.Order = f.st.Order[drop:]
}

// attempt finds an attempt by id; it must be called with f.mu held.
func (f *FSM) attempt(id string) (*jobs.Run, *jobs.Attempt, error) {
	runID, n, ok := jobs.SplitAttemptID(id)
	if !ok {
		return nil, nil, fmt.Errorf("attempt %q: malformed id", id)
	}
	r, ok := f.st.Runs[runID]
	if !ok || n > len(r.Attempts) {
		return nil, nil, fmt.Errorf("attempt %s: %w", id, jobs.ErrNotFound)
	}
	return r, &r.Attempts[n-1], nil
}

func (f *FSM) applyStart(s *startCmd) applyResult {
	r, a, err := f.attempt(s.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	if a.State != jobs.Pending {
		return applyResult{Run: r.Clone()} // a repeated start changes nothing
	}
	if latest, _ := r.Latest(); latest.ID != a.ID {
		return applyResult{Run: r.Clone(), Err: fmt.Errorf("start %s: %w", a.ID, jobs.ErrStaleAttempt)}
	}
	a.State, a.StartedAt = jobs.Running, s.At
	r.State = jobs.Running
	return applyResult{Run: r.Clone()}
}

func (f *FSM) applyComplete(c *Completion) applyResult {
	r, a, err := f.attempt(c.Attempt)
	if err != nil {
		return applyResult{Err: err}
	}
	if a.State.Terminal() {
		return applyResult{Run: r.Clone()} // a repeated completion changes nothing
	}
	if !c.State.Terminal() {
		return applyResult{Err: fmt.Errorf("complete %s: state %q is not terminal", a.ID, c.State)}
	}
	a.State = c.State
	a.ExitCode, a.Signal = c.ExitCode, c.Signal
	a.StoreOutcome, a.StoreVersion = c.StoreOutcome, c.StoreVersion
	a.Error, a.StderrTail = c.Error, c.StderrTail
	if !c.StartedAt.IsZero() && a.StartedAt.IsZero() {
		a.StartedAt = c.StartedAt
	}
	a.EndedAt = c.EndedAt
	if latest, _ := r.Latest(); latest.ID == a.ID {
		r.State = c.State
	}
	return applyResult{Run: r.Clone()}
}

// Snapshot implements raft.FSM.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := json.Marshal(f.st)
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st := emptyState()
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if st.Runs == nil {
		st.Runs = map[string]*jobs.Run{}
	}
	if st.Horizon == nil {
		st.Horizon = map[string]time.Time{}
	}
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	notify(f.jobsChanged)
	notify(f.applied)
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Epoch returns the term of the last leader whose election entry was
// applied, and that leader's node id.
func (f *FSM) Epoch() (uint64, string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.Epoch, f.st.Leader
}

// JobSetInfo says which job set the cluster runs.
type JobSetInfo struct {
	Hash      string    `json:"hash"`
	Source    string    `json:"source"`
	AppliedAt time.Time `json:"applied_at"`
	Count     int       `json:"count"`
}

// JobSet returns the replicated job set, where it came from and when, and
// whether one was ever applied.
func (f *FSM) JobSet() (specs []jobs.Spec, source string, at time.Time, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.st.Jobs), f.st.JobsFrom, f.st.JobsAt, f.st.HasJobs
}

// JobSetInfo describes the replicated job set; Hash is "" if none was
// ever applied.
func (f *FSM) JobSetInfo() JobSetInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return JobSetInfo{Hash: f.st.JobsHash, Source: f.st.JobsFrom, AppliedAt: f.st.JobsAt, Count: len(f.st.Jobs)}
}

// JobsChanged is signalled, coalesced, when the job set changes.
func (f *FSM) JobsChanged() <-chan struct{} { return f.jobsChanged }

// Applied is signalled, coalesced, after every applied entry.
func (f *FSM) Applied() <-chan struct{} { return f.applied }

// RunFilter selects runs.
type RunFilter struct {
	Job   string
	Limit int // 0: all
}

// Runs returns runs, newest grant first.
func (f *FSM) Runs(filter RunFilter) []jobs.Run {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []jobs.Run
	for i := len(f.st.Order) - 1; i >= 0; i-- {
		r := f.st.Runs[f.st.Order[i]]
		if filter.Job != "" && r.Job != filter.Job {
			continue
		}
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

// LastRun returns the newest run of a job.
func (f *FSM) LastRun(job string) (jobs.Run, bool) {
	runs := f.Runs(RunFilter{Job: job, Limit: 1})
	if len(runs) == 0 {
		return jobs.Run{}, false
	}
	return runs[0], true
}

// OpenRuns returns the runs of a job that have not finished.
func (f *FSM) OpenRuns(job string) []jobs.Run {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []jobs.Run
	for _, id := range f.st.Order {
		if r := f.st.Runs[id]; r.Job == job && !r.State.Terminal() {
			out = append(out, r.Clone())
		}
	}
	return out
}

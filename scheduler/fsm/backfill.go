package fsm

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A backfill creates one run per fire time of a job's schedule in a past
// range [from, to), with trigger "backfill", for the times that have no
// run. It is replicated state, not a loop in one leader's memory:
//
//   - the request is one log entry (op "backfill") whose Apply decides,
//     from the replicated state alone (DecideBackfill), which of the times
//     the leader enumerated get a run: none that already has one, none at
//     or before the job's retained horizon (its runs there were dropped to
//     keep the state bounded, so whether such a time ran cannot be told,
//     and a second run for it must never be granted); the others join the
//     job's backfill queue (state.Backfills);
//   - the leader grants from that queue, each grant an ordinary grant
//     entry with trigger "backfill", and Apply admits it only while the
//     job has fewer than max_running backfill runs open (BackfillRoom):
//     the throttle is decided in the log, so two leaders, or a leader and
//     its successor, cannot both fill it;
//   - a new leader finds the queue in the state (and in snapshots) and
//     goes on where the old one stopped.
//
// Overlap: under allow, up to max_running backfill runs run beside
// whatever else runs. Under forbid and replace a backfill run waits until
// no run of the job is open (it never replaces one); while it runs it
// holds the job like any run, so a scheduled fire time that comes then is
// skipped under forbid and cancels it under replace, as behind any long
// run. A paused job's backfill waits for resume; a job removed from the
// set loses its queue.

// TriggerBackfill is the trigger of the runs a backfill creates.
const TriggerBackfill = "backfill"

// ErrBackfillWait refuses a backfill grant while the job has no room for
// another backfill run (max_running open, or any run open under forbid or
// replace): nothing is recorded and the time stays queued.
var ErrBackfillWait = errors.New("backfill waits: no room for another run of the job")

// BackfillError is a backfill request that cannot be done as asked (bad
// range, too many fire times). It wraps jobs.ErrInvalidConfig.
type BackfillError struct{ Msg string }

func (e *BackfillError) Error() string { return e.Msg }

// Unwrap returns jobs.ErrInvalidConfig.
func (e *BackfillError) Unwrap() error { return jobs.ErrInvalidConfig }

// BackfillRequest asks for the runs of Job in [From, To).
type BackfillRequest struct {
	Job  string    `json:"job"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// DryRun lists what would be created and creates nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// MaxRunning bounds the job's open backfill runs; 0: the default, 1.
	MaxRunning int `json:"max_running,omitempty"`
	// Asker names who asked, for the audit trail (a token's accessor and
	// name with ACLs on; never a secret).
	Asker string `json:"asker,omitempty"`
}

// BackfillResult says what a backfill did, or would do (DryRun).
type BackfillResult struct {
	Job        string    `json:"job"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	DryRun     bool      `json:"dry_run"`
	MaxRunning int       `json:"max_running"`
	// Create are the fire times queued for a run (dry run: that would be).
	Create []time.Time `json:"create"`
	// Existing are the fire times that already have a run.
	Existing []BackfillExisting `json:"existing"`
	// Queued are fire times an earlier backfill already queued.
	Queued []time.Time `json:"queued,omitempty"`
	// BeforeHorizon are fire times at or before Horizon, the latest
	// scheduled time of the job's runs dropped from the state: refused,
	// for whether they ran cannot be told.
	BeforeHorizon []time.Time `json:"before_horizon,omitempty"`
	Horizon       time.Time   `json:"horizon,omitzero"`
	// Pending is how many fire times the job's backfill queue holds after
	// this request.
	Pending int `json:"pending"`
}

// BackfillExisting is a fire time that already has a run.
type BackfillExisting struct {
	At      time.Time  `json:"at"`
	Run     string     `json:"run"`
	State   jobs.State `json:"state"`
	Trigger string     `json:"trigger,omitempty"`
}

// BackfillInput is what DecideBackfill reads.
type BackfillInput struct {
	Job   string
	Times []time.Time
	// Runs are the recorded runs, by id; Horizon the job's retained
	// horizon; Queued the job's queue.
	Runs    map[string]*jobs.Run
	Horizon time.Time
	Queued  []time.Time
}

// DecideBackfill sorts the fire times of a backfill request: those with a
// run, those at or before the horizon, those already queued, and those to
// create. FSM.Apply calls it for the request's entry; a dry run calls it
// on the same state.
func DecideBackfill(in BackfillInput) (create, queued, beforeHorizon []time.Time, existing []BackfillExisting) {
	// Both lists may hold MaxBackfillTimes: look the queue up by instant.
	inQueue := make(map[int64]bool, len(in.Queued))
	for _, t := range in.Queued {
		inQueue[t.UnixNano()] = true
	}
	for _, t := range in.Times {
		switch r := in.Runs[jobs.RunID(in.Job, t)]; {
		case r != nil:
			existing = append(existing, BackfillExisting{At: t, Run: r.ID, State: r.State, Trigger: r.Trigger})
		case !in.Horizon.IsZero() && !t.After(in.Horizon):
			beforeHorizon = append(beforeHorizon, t)
		case inQueue[t.UnixNano()]:
			queued = append(queued, t)
		default:
			create = append(create, t)
		}
	}
	return create, queued, beforeHorizon, existing
}

// BackfillRoom is how many more backfill runs of a job may start now:
// maxRunning less its open backfill runs, and none while any run of the
// job is open under forbid or replace (a backfill run never runs beside
// another there, nor replaces one).
func BackfillRoom(overlap string, open []jobs.Run, maxRunning int) int {
	n := 0
	for _, r := range open {
		if r.Trigger == TriggerBackfill {
			n++
		}
	}
	if overlap != jobs.OverlapAllow && len(open) > 0 {
		return 0
	}
	return max(maxRunning-n, 0)
}

// applyBackfill queues the fire times of c that have no run (a job's
// queue merges requests, in time order; the latest max_running holds).
func (f *FSM) applyBackfill(l *raft.Log, c *replicated.BackfillCmd) ApplyResult {
	if _, ok := f.spec(c.Job); !ok {
		return ApplyResult{Err: fmt.Errorf("backfill %s: %w", c.Job, jobs.ErrUnknownJob)}
	}
	res := f.planBackfill(c.Job, c.Times)
	res.From, res.To, res.MaxRunning = c.From, c.To, c.MaxRunning
	q := f.st.Backfills[c.Job]
	if q == nil {
		q = &replicated.BackfillQueue{}
	}
	if len(q.Times)+len(res.Create) > replicated.MaxBackfillTimes {
		return ApplyResult{Err: &BackfillError{Msg: fmt.Sprintf("backfill %s: %d fire times are queued already; with %d more the queue would pass %d: wait for it to drain",
			c.Job, len(q.Times), len(res.Create), replicated.MaxBackfillTimes)}}
	}
	if len(res.Create) > 0 {
		q.Times = append(q.Times, res.Create...)
		slices.SortFunc(q.Times, func(a, b time.Time) int { return a.Compare(b) })
	}
	q.MaxRunning = c.MaxRunning
	if len(q.Times) > 0 {
		if f.st.Backfills == nil {
			f.st.Backfills = map[string]*replicated.BackfillQueue{}
		}
		f.st.Backfills[c.Job] = q
	}
	res.Pending = len(q.Times)
	detail := fmt.Sprintf("backfill [%s, %s): %d fire times queued, %d already have a run, %d already queued, %d at or before the retained horizon; max_running %d",
		c.From.Format(time.RFC3339), c.To.Format(time.RFC3339), len(res.Create), len(res.Existing), len(res.Queued), len(res.BeforeHorizon), c.MaxRunning)
	if c.By != "" {
		// Written by entries of log version 10 (VersionACL) on.
		detail += "; asked by " + replicated.Clip(c.By, MaxReleaseAsker)
	}
	f.event(l, jobs.Event{Time: c.At, Kind: TriggerBackfill, Job: c.Job, Detail: detail})
	f.changed(l, Change{Kind: ChangeJobs})
	return ApplyResult{Backfill: &res}
}

// planBackfill decides a request's times on the current state; f.mu held.
func (f *FSM) planBackfill(job string, times []time.Time) BackfillResult {
	var queued []time.Time
	if q := f.st.Backfills[job]; q != nil {
		queued = q.Times
	}
	horizon := f.st.Horizon[job]
	res := BackfillResult{Job: job, Horizon: horizon, Pending: len(queued)}
	res.Create, res.Queued, res.BeforeHorizon, res.Existing = DecideBackfill(BackfillInput{
		Job: job, Times: times, Runs: f.st.Runs, Horizon: horizon, Queued: queued,
	})
	return res
}

// admitBackfill decides a grant entry with trigger backfill (version 4):
// its time must be queued, and a grant (not a skip) needs room
// (BackfillRoom). An admitted time leaves the queue; what happens to it
// then is an ordinary grant's decision (DecideGrant). f.mu held.
func (f *FSM) admitBackfill(op string, g *replicated.GrantCmd, spec jobs.Spec) error {
	q := f.st.Backfills[g.Job]
	i := -1
	if q != nil {
		i = slices.IndexFunc(q.Times, g.ScheduledAt.Equal)
	}
	if i < 0 {
		return fmt.Errorf("backfill grant %s: not queued by a backfill: %w", jobs.RunID(g.Job, g.ScheduledAt), jobs.ErrInvalidConfig)
	}
	if op == replicated.OpGrant && BackfillRoom(spec.Overlap, f.openRuns(g.Job), q.MaxRunning) < 1 {
		return fmt.Errorf("grant %s: %w", jobs.RunID(g.Job, g.ScheduledAt), ErrBackfillWait)
	}
	q.Times = slices.Delete(q.Times, i, i+1)
	if len(q.Times) == 0 {
		delete(f.st.Backfills, g.Job)
	}
	return nil
}

// dropBackfills forgets the queues of jobs no longer in the set; f.mu held.
func (f *FSM) dropBackfills() {
	for job := range f.st.Backfills {
		if _, ok := f.spec(job); !ok {
			delete(f.st.Backfills, job)
		}
	}
}

// BackfillDue returns, per job with a backfill queue, the fire times its
// leader may grant now (BackfillRoom of them, oldest first).
func (f *FSM) BackfillDue() map[string][]time.Time {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := map[string][]time.Time{}
	for job, q := range f.st.Backfills {
		spec, ok := f.spec(job)
		if !ok {
			continue
		}
		if n := min(BackfillRoom(spec.Overlap, f.openRuns(job), q.MaxRunning), len(q.Times)); n > 0 {
			out[job] = slices.Clone(q.Times[:n])
		}
	}
	return out
}

// PlanBackfill is a dry run of a backfill of job's times on the current
// state.
func (f *FSM) PlanBackfill(job string, times []time.Time) BackfillResult {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.planBackfill(job, times)
}

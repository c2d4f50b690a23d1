package replicated

import (
	"fmt"
	"strings"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
)

// Bounds on the replicated state, so snapshots stay small.
const (
	DefaultMaxRuns = 2000
	MaxEvents      = 2000
	MaxSkipRanges  = 1000
)

// State is the replicated state; it is what snapshots hold.
type State struct {
	Epoch     uint64    `json:"epoch"`
	Leader    string    `json:"leader"`
	ElectedAt time.Time `json:"elected_at"`
	// ElectedIndex is the log index of the last election entry: an
	// attempt granted after it was granted by the leader loop that
	// committed it (fsm/startconfirm.go).
	ElectedIndex uint64 `json:"elected_index,omitempty"`
	// Jobs is replaced whole by a new set, never changed in place: a
	// snapshot encodes it after letting go of the lock. A spec is never
	// written either: a set changed in a few jobs shares the others with
	// the set before it, and exports share them with the FSM.
	Jobs     []*jobs.Spec `json:"jobs,omitempty"`
	JobsFrom string       `json:"jobs_from"`
	JobsAt   time.Time    `json:"jobs_at"`
	JobsHash string       `json:"jobs_hash"`
	HasJobs  bool         `json:"has_jobs"`
	// Paused is set by pause and cleared by resume, on top of the spec.
	Paused map[string]bool      `json:"paused"`
	Runs   map[string]*jobs.Run `json:"runs"`
	// Order lists run ids oldest grant first.
	Order []string `json:"order"`
	// Horizon is, per job, the latest scheduled time of a run dropped to
	// keep the state bounded; nothing at or before it can be granted again.
	Horizon map[string]time.Time `json:"horizon"`
	// LastScheduled is, per job, the latest scheduled time granted or
	// skipped: where a new leader's catch-up starts.
	LastScheduled map[string]time.Time `json:"last_scheduled"`
	// LastRuns is, per job, its newest run as it was last seen: the run
	// itself may have been dropped (see RunSummary).
	LastRuns map[string]RunSummary `json:"last_runs,omitempty"`
	Skips    []jobs.SkipRange      `json:"skips"`
	Events   []jobs.Event          `json:"events"`
	EventSeq uint64                `json:"event_seq"`
	Counters map[string]uint64     `json:"counters"`
	// LastIndex is the index of the last applied entry.
	LastIndex uint64 `json:"last_index"`
	// RangeRefusedTerm is the last term in which a grant was refused for
	// a token out of range: the refusal is recorded as an event once per
	// term, so that retrying leaders do not flood the audit trail.
	RangeRefusedTerm uint64 `json:"range_refused_term,omitempty"`
	// Version is the format version of a snapshot (LogVersion when
	// written; absent, and so 1, in snapshots older than versions).
	Version int `json:"log_version,omitempty"`
	// EpochBase is added to the Raft term to make the epoch. It is 0
	// until the cluster is restored from a snapshot (`fencecron snapshot
	// restore`, PrepareRestore): then it is at least the greatest epoch
	// the snapshot's cluster, the restoring cluster and its store had
	// seen, so that epochs and tokens go on growing in a cluster whose
	// Raft terms started again from 1.
	EpochBase uint64 `json:"epoch_base,omitempty"`
	// JobStats are each job's finished runs by state and last success
	// (fsm/jobstats.go); nil until a run of the set finishes.
	JobStats map[string]*JobStats `json:"job_stats,omitempty"`
	// Notices are the notifications pending delivery, NoticeSeq the last
	// notice's id, and LastFinal each job's last finished run's state
	// (for recovered); see notify.go.
	Notices   []Notice              `json:"notices,omitempty"`
	NoticeSeq uint64                `json:"notice_seq,omitempty"`
	LastFinal map[string]jobs.State `json:"last_final,omitempty"`
	// Backfills are, per job, the fire times a backfill still has to
	// grant (backfill.go; log version 4).
	Backfills map[string]*BackfillQueue `json:"backfills,omitempty"`
	// GroupQueue is, per concurrency group, its waiting runs, oldest fire
	// time first (fsm/groups.go).
	GroupQueue map[string][]GroupWaiter `json:"group_queue,omitempty"`
	// JobsStage is a job set difference whose parts are still arriving
	// (log version 8; nil when none is).
	JobsStage *JobsStage `json:"jobs_stage,omitempty"`
	// ACL is the access control state (log version 10; nil until the
	// first ACL entry). It is replaced whole by each ACL entry, never
	// changed in place (acl.Decide).
	ACL *acl.State `json:"acl,omitempty"`
}

func EmptyState() State {
	return State{
		Runs: map[string]*jobs.Run{}, Horizon: map[string]time.Time{},
		Paused: map[string]bool{}, LastScheduled: map[string]time.Time{},
		LastRuns: map[string]RunSummary{}, Counters: map[string]uint64{},
		GroupQueue: map[string][]GroupWaiter{},
	}
}

// GroupWaiter is one run waiting for a place in its group.
type GroupWaiter struct {
	Run         string    `json:"run"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Since       time.Time `json:"since"`
}

// MaxNotices bounds the pending notices: past it the oldest is dropped
// and recorded as notify_failed.
const MaxNotices = 1000

// Notice is one notification due: one notify entry of a job for one
// transition, with what its message says.
type Notice struct {
	// ID numbers notices in the order they were decided; Index is the
	// log index of the entry that decided it.
	ID    uint64 `json:"id"`
	Index uint64 `json:"index"`
	// State is the state notified (an attempt's, a skipped run's, or
	// recovered); RunState is the run's state then.
	State    string     `json:"state"`
	RunState jobs.State `json:"run_state"`
	Job      string     `json:"job"`
	Run      string     `json:"run"`
	Attempt  string     `json:"attempt,omitempty"`
	Number   int        `json:"number,omitempty"`
	// Final says the run has finished: no retry follows.
	Final       bool        `json:"final"`
	ScheduledAt time.Time   `json:"scheduled_at"`
	Worker      string      `json:"worker,omitempty"`
	Token       *jobs.Fence `json:"token,omitempty"`
	ExitCode    *int        `json:"exit_code,omitempty"`
	Error       string      `json:"error,omitempty"`
	Reason      string      `json:"reason,omitempty"`
	At          time.Time   `json:"at"`
	// Target is the notify entry it goes to (its On left out).
	Target jobs.Notify `json:"target"`
}

// Key is the notice's stable id, the same on every node and every try.
func (n Notice) Key() string { return fmt.Sprintf("%s/%d/%d", n.Run, n.Index, n.ID) }

// Kind is the notice's target kind.
func (n Notice) Kind() string { return n.Target.Kind() }

// Delivery is the outcome of one notice: delivered if Error is empty,
// given up on otherwise.
type Delivery struct {
	ID    uint64 `json:"id"`
	Tries int    `json:"tries"`
	Error string `json:"error,omitempty"`
}

// RunSummary is what the replicated state keeps of a job's newest run
// once the run itself has been dropped to keep the state bounded: enough
// for the Jobs page and GET /api/v1/jobs to say how it ended, and to
// search jobs by it, without keeping every run.
type RunSummary struct {
	ID          string     `json:"id"`
	ScheduledAt time.Time  `json:"scheduled_at"`
	State       jobs.State `json:"state"`
	Trigger     string     `json:"trigger,omitempty"`
	Output      string     `json:"output,omitempty"`
	// Attempt is the run's newest attempt when it was dropped, if any.
	Attempt *jobs.Attempt `json:"attempt,omitempty"`
}

// SummaryOf returns the summary of r.
func SummaryOf(r *jobs.Run) RunSummary {
	s := RunSummary{ID: r.ID, ScheduledAt: r.ScheduledAt, State: r.State, Trigger: r.Trigger, Output: r.Output}
	if a, ok := r.Latest(); ok {
		c := *a
		// The tail and refusals stay with the run; the summary is small.
		c.StderrTail, c.StdoutTail, c.StoreRefusals, c.ExitCode = "", "", nil, nil
		s.Attempt = &c
	}
	return s
}

// Bounds of a backfill.
const (
	// MaxBackfillTimes bounds the fire times of one request, and a job's
	// queue: each is a timestamp in one log entry and in every snapshot.
	MaxBackfillTimes          = 10_000
	DefaultBackfillMaxRunning = 1
	MaxBackfillMaxRunning     = 100
)

// BackfillQueue is a job's fire times still to grant, oldest first, and
// how many of its backfill runs may be open at once.
type BackfillQueue struct {
	Times      []time.Time `json:"times"`
	MaxRunning int         `json:"max_running"`
}

// MaxStoreRefusals bounds the refusals kept on one attempt (all are
// counted), and MaxRefusalDetail the size of one (a store key is at most
// 1024 bytes).
const (
	MaxStoreRefusals = 8
	MaxRefusalDetail = 1200
)

// JobStats are one job's lifetime figures in the replicated state, for
// alerting: its finished runs by final state (skipped fire times
// included, one per fire time) and when its last successful run ended.
// They are decided as entries apply, so every server reports the same,
// and a snapshot carries them. A job's figures go when it leaves the set:
// their number is bounded by the set's size times the run states.
type JobStats struct {
	Runs        map[jobs.State]uint64 `json:"runs"`
	LastSuccess time.Time             `json:"last_success,omitzero"`
}

// Clip cuts s to at most n bytes of valid UTF-8 and marks the cut with
// "...": what the state keeps of a text someone else wrote is bounded.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// Run returns the summary as a run: its newest attempt only.
func (s RunSummary) Run(job string) jobs.Run {
	r := jobs.Run{ID: s.ID, Job: job, ScheduledAt: s.ScheduledAt, State: s.State, Trigger: s.Trigger, Output: s.Output}
	if s.Attempt != nil {
		r.Attempts = []jobs.Attempt{*s.Attempt}
	}
	return r
}

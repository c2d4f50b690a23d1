// Package jobs holds fencecron's domain: what a job is, what a run and an
// attempt of it are, the states they move through, and the small interfaces
// the other packages implement. It imports nothing else of fencecron's.
package jobs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// Sentinel errors shared across packages.
var (
	ErrNotFound      = errors.New("not found")
	ErrDuplicateRun  = errors.New("run already granted for this job and scheduled time")
	ErrNotLeader     = errors.New("not the leader")
	ErrUnknownJob    = errors.New("unknown job")
	ErrStaleAttempt  = errors.New("attempt is not the current attempt of its run")
	ErrRunFinished   = errors.New("run already finished")
	ErrInvalidConfig = errors.New("invalid config")
	// ErrTokenRange: a grant in a Raft entry whose term or index is
	// outside the fence-token range (1 to 2^63-1), so its token would be
	// refused by every store. Nothing is granted.
	ErrTokenRange = errors.New("fence token out of range")
)

// State is the state of a run or of one of its attempts.
type State string

// Run and attempt states. A run's state is its latest attempt's state,
// except that a run can be skipped without any attempt; a run whose
// latest attempt failed, timed out or was lost with retries left is
// pending, for it has not finished until its retry has; and a run
// replaced while it waited for that retry is cancelled (Run.NoRetry).
const (
	Pending   State = "pending"
	Running   State = "running"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Fenced    State = "fenced"
	TimedOut  State = "timed_out"
	Lost      State = "lost"
	Cancelled State = "cancelled"
	Skipped   State = "skipped"
)

// Terminal reports whether nothing more can happen to something in state s.
func (s State) Terminal() bool {
	switch s {
	case Pending, Running:
		return false
	}
	return true
}

// Known reports whether s is one of the states above.
func (s State) Known() bool {
	switch s {
	case Pending, Running, Succeeded, Failed, Fenced, TimedOut, Lost, Cancelled, Skipped:
		return true
	}
	return false
}

// Fence is the fence token an attempt carries: the Raft term of the leader
// that committed its grant (Epoch) and the log index of that grant (Seq).
// It is the store's token type, whose rules the store owns.
type Fence = fencedstore.Token

// Run is one logical execution of a job for one scheduled time. The pair
// (Job, ScheduledAt) is unique in the replicated state.
type Run struct {
	ID          string    `json:"id"`
	Job         string    `json:"job"`
	ScheduledAt time.Time `json:"scheduled_at"`
	// Output is the store key the run's stdout is published to, rendered
	// from the job's output template when the run was granted.
	Output  string `json:"output,omitempty"`
	State   State  `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Trigger string `json:"trigger,omitempty"` // "schedule", "manual", "catchup", "after"
	// NoRetry is set when a newer run replaced this one (overlap: replace)
	// while it waited for a retry: it gets none, and stays cancelled
	// whatever its last attempt's worker reports late.
	NoRetry bool `json:"no_retry,omitempty"`
	// Forced is set on a manual run granted with trigger -force, over
	// the job's overlap policy.
	Forced bool `json:"forced,omitempty"`
	// After names the parents' runs a run of a job with after: followed
	// (trigger "after"), or the one whose failure skipped it.
	After []string `json:"after,omitempty"`
	// Group is the concurrency group of the run's job when it was
	// granted; while the group is full the run waits, pending with no
	// attempt (IsWaiting).
	Group    string    `json:"group,omitempty"`
	Attempts []Attempt `json:"attempts"`
}

// Attempt is one grant of a run to one worker, with its own token.
type Attempt struct {
	ID        string    `json:"id"`
	Number    int       `json:"number"`
	Token     Fence     `json:"token"`
	Worker    string    `json:"worker"`
	State     State     `json:"state"`
	GrantedAt time.Time `json:"granted_at"`
	// AcceptedAt is when the worker received the attempt's dispatch, by
	// its own clock (reported with the completion; log version 3). With
	// GrantedAt and StartedAt it tells where a run's lateness went.
	AcceptedAt time.Time `json:"accepted_at,omitzero"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	ExitCode   *int      `json:"exit_code,omitempty"`
	Signal     string    `json:"signal,omitempty"`
	// HTTPStatus is the response status of an HTTP job's request, where
	// a process has its exit code, and ResponseBytes the size of the
	// response body it read (log version 8).
	HTTPStatus    int   `json:"http_status,omitempty"`
	ResponseBytes int64 `json:"response_bytes,omitempty"`
	// StoreOutcome is what the fenced store answered to the publish of the
	// attempt's output: applied, stale_owner or conflict.
	StoreOutcome string `json:"store_outcome,omitempty"`
	StoreVersion uint64 `json:"store_version,omitempty"`
	Error        string `json:"error,omitempty"`
	StderrTail   string `json:"stderr_tail,omitempty"`
	// StdoutTail is the end of the attempt's stdout when it was not
	// published (the store has it then), at most 16 KiB.
	StdoutTail string `json:"stdout_tail,omitempty"`
	// Expired is set when the leader took the attempt's lease away; the
	// worker may still report what happened afterwards.
	Expired bool `json:"expired,omitempty"`
	// NeverStarted is set on an expired attempt whose process the leader
	// knows never started: its worker announced that it confirms a start
	// before starting, and never asked. Such an attempt does not count
	// against the job's retries (scheduler/fsm/startconfirm.go).
	NeverStarted bool `json:"never_started,omitempty"`
	// StartInLog is set on an attempt granted ahead of its fire time by
	// an entry of log version 11: its start is confirmed by an entry of
	// the log before its worker may begin, so the state alone says
	// whether it may have begun (StartConfirmed), whichever leader
	// reads it (scheduler/fsm/prestart.go).
	StartInLog bool `json:"start_in_log,omitempty"`
	// StartConfirmed is set once the entry confirming that start was
	// applied: from then on its worker may have started it.
	StartConfirmed bool `json:"start_confirmed,omitempty"`
	// StoreRefusals are the store's refusals of this attempt's writes
	// that the node serving the store reported (NoteStoreRefused), as
	// "<outcome> <key> greatest=<epoch.seq>": the first few, oldest first.
	StoreRefusals []string `json:"store_refusals,omitempty"`
}

// Event is one entry of the cluster's audit trail: leadership changes,
// grants, expiries, completions, refusals, skips, config applies.
type Event struct {
	Seq     uint64    `json:"seq"`
	Index   uint64    `json:"index"` // the Raft entry that recorded it
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Node    string    `json:"node,omitempty"`
	Job     string    `json:"job,omitempty"`
	Run     string    `json:"run,omitempty"`
	Attempt string    `json:"attempt,omitempty"`
	Token   *Fence    `json:"token,omitempty"`
	Epoch   uint64    `json:"epoch,omitempty"`
	Detail  string    `json:"detail,omitempty"`
}

// Event kinds.
const (
	EventElected   = "elected"
	EventJobSet    = "jobs_applied"
	EventGranted   = "granted"
	EventSkipped   = "skipped"
	EventStarted   = "started"
	EventCompleted = "completed"
	EventFenced    = "fenced"
	EventExpired   = "expired"
	EventCancelled = "cancelled"
	EventPaused    = "paused"
	EventResumed   = "resumed"
	EventSuspect   = "suspect"
	EventLost      = "lost"
	// EventLoginFailed: a client address was locked out of the
	// dashboard's login after failed tokens (one entry per lockout).
	EventLoginFailed = "login_failed"
	// EventGrantRefused: the FSM refused to mint a token out of range
	// (ErrTokenRange); recorded once per term.
	EventGrantRefused = "grant_refused"
	// EventForced: an operator's trigger -force granted a run whatever
	// the job's overlap policy said (recorded with the grant, even when
	// nothing was open).
	EventForced = "forced"
	// EventClockSkew: a node found a peer's wall clock beyond
	// cluster.max_clock_skew from its own, or back within it (log
	// version 4).
	EventClockSkew = "clock_skew"
	// EventReleased: an operator ended an attempt's lease now (fencecron
	// release); its detail names who asked and why.
	EventReleased = "released"
	// EventWaiting: a run of a concurrency group's job waits for a place
	// in its group; EventAdmitted: it got one.
	EventWaiting  = "waiting"
	EventAdmitted = "admitted"
	// EventACL: the access control state changed (log version 10): a
	// bootstrap, a policy applied or deleted, a token created or
	// revoked; its detail names the token by accessor and name (never its
	// secret) and who asked.
	EventACL = "acl"
	// EventRestored: an operator restored the replicated state from a
	// snapshot (log version 10; written with ACLs on, naming the token).
	EventRestored = "restored"
)

// NoteStoreRefused is the kind of note the node serving the store sends
// when it refuses a write (stale_owner or expired) that carries an
// attempt's verified signed token. Its detail is
// "<outcome> <key> greatest=<epoch.seq>". The FSM counts it (cluster
// counter stale_refused), remembers it on the attempt, and an attempt that
// then ends failed ends fenced instead: a job that exits non-zero because
// its own publish was refused was fenced, not broken.
const NoteStoreRefused = "store_refused"

// NoteKinds are the kinds of note a node may send about an attempt
// (Note); anything else is refused.
var NoteKinds = []string{EventSuspect, EventLost, NoteStoreRefused}

// AuditKinds are the kinds of audit entry a node may send (Audit);
// anything else is refused.
var AuditKinds = []string{EventLoginFailed, EventClockSkew, EventRestored}

// SkipRange records scheduled times of a job that were deliberately not
// run: Count fire times from From to To inclusive, and why.
type SkipRange struct {
	Job    string    `json:"job"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Count  int       `json:"count"`
	Reason string    `json:"reason"`
}

// Duration returns how long the attempt ran, or zero if it has not ended.
func (a Attempt) Duration() time.Duration {
	if a.StartedAt.IsZero() || a.EndedAt.IsZero() {
		return 0
	}
	return a.EndedAt.Sub(a.StartedAt)
}

// ShowDuration writes a run's duration for people: "" for none, to the
// microsecond under a millisecond (a short command's process can end
// within half a millisecond of its exec, and "0s" would say it did not
// run), to the millisecond under a second, and to 10 ms above.
func ShowDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// Latest returns the run's newest attempt, or false if it has none.
func (r *Run) Latest() (*Attempt, bool) {
	if len(r.Attempts) == 0 {
		return nil, false
	}
	return &r.Attempts[len(r.Attempts)-1], true
}

// Clone returns a deep copy of r.
func (r *Run) Clone() Run {
	c := *r
	c.Attempts = make([]Attempt, len(r.Attempts))
	for i, a := range r.Attempts {
		if a.ExitCode != nil {
			code := *a.ExitCode
			a.ExitCode = &code
		}
		a.StoreRefusals = slices.Clone(a.StoreRefusals)
		c.Attempts[i] = a
	}
	return c
}

// RunID names the run of job for scheduled time: readable, and the same on
// every node, so an uncertain grant can be looked up by it.
func RunID(job string, scheduled time.Time) string {
	layout := "20060102T150405Z"
	if scheduled.Nanosecond() != 0 {
		layout = "20060102T150405.000Z"
	}
	return job + "@" + scheduled.UTC().Format(layout)
}

// AttemptID names attempt number n of a run.
func AttemptID(runID string, n int) string { return runID + "." + strconv.Itoa(n) }

// SplitAttemptID returns the run id and number of an attempt id.
func SplitAttemptID(id string) (runID string, n int, ok bool) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 {
		return "", 0, false
	}
	// The state machine splits ids of entries already in the log, so what
	// this accepts may never change: fmt.Sscanf's %d, which reads a number
	// at the start of the text and ignores what follows ("1x" is 1).
	// strconv reads every id this code makes, and whatever it accepts
	// Sscanf reads the same, for 4% less of the leader's CPU at 1,000
	// completions a second; what it refuses goes to Sscanf as before.
	num := id[i+1:]
	n, err := strconv.Atoi(num)
	if err != nil {
		_, err = fmt.Sscanf(num, "%d", &n)
	}
	if err != nil || n < 1 {
		return "", 0, false
	}
	return id[:i], n, true
}

// MisfireGrace is how late the latest due fire time of a job with
// misfire: skip may be and still run: the leader fires it, and a worker
// counts a run granted later than this after its time as a catch-up.
const MisfireGrace = 2 * time.Second

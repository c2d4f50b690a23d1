package replicated

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/specjson"
	"github.com/fencecron/fencecron/scheduler/acl"
)

// Ops by name, as they are written in the log.
const (
	OpElected     = "elected"
	OpSetJobs     = "set_jobs"
	OpGrant       = "grant"
	OpSkip        = "skip"
	OpSkipRange   = "skip_range"
	OpStart       = "start"
	OpComplete    = "complete"
	OpExpire      = "expire"
	OpRetry       = "retry"
	OpPause       = "pause"
	OpNote        = "note"
	OpAudit       = "audit"
	OpGrants      = "grants"
	OpCompletes   = "completes"
	OpSkipRanges  = "skip_ranges"
	OpNotified    = "notified"
	OpBackfill    = "backfill"
	OpRelease     = "release"
	OpAdmit       = "admit"
	OpStarts      = "starts"
	OpSetJobsDiff = "set_jobs_diff"
	OpACL         = "acl"
	// OpConfirmStarts: ConfirmStartsCmd (log version 11).
	OpConfirmStarts = "confirm_starts"
)

// Command is one entry of the replicated log: its format version (see
// versions.go), its op, and exactly one payload, in the field named
// after the op. Follow may ride along (fsm/after.go).
type Command struct {
	V       int         `json:"v,omitempty"`
	Op      string      `json:"op"`
	Elected *ElectedCmd `json:"elected,omitempty"`
	SetJobs *SetJobsCmd `json:"set_jobs,omitempty"`
	// SetJobsDiff is OpSetJobsDiff's payload.
	SetJobsDiff *SetJobsDiffCmd `json:"set_jobs_diff,omitempty"`
	Grant       *GrantCmd       `json:"grant,omitempty"`
	SkipRange   *SkipRangeCmd   `json:"skip_range,omitempty"`
	Start       *StartCmd       `json:"start,omitempty"`
	Complete    *Completion     `json:"complete,omitempty"`
	Expire      *ExpireCmd      `json:"expire,omitempty"`
	Retry       *RetryCmd       `json:"retry,omitempty"`
	Pause       *PauseCmd       `json:"pause,omitempty"`
	Note        *NoteCmd        `json:"note,omitempty"`
	Audit       *AuditCmd       `json:"audit,omitempty"`
	Grants      *GrantsCmd      `json:"grants,omitempty"`
	Completes   *CompletesCmd   `json:"completes,omitempty"`
	Starts      *StartsCmd      `json:"starts,omitempty"`
	// ConfirmStarts is OpConfirmStarts' payload.
	ConfirmStarts *ConfirmStartsCmd `json:"confirm_starts,omitempty"`
	// SkipRanges is OpSkipRanges' payload.
	SkipRanges *SkipRangesCmd `json:"skip_ranges,omitempty"`
	Notified   *NotifiedCmd   `json:"notified,omitempty"`
	// Follow rides on entries that may finish runs (fsm/after.go).
	Follow   *FollowCmd   `json:"follow,omitempty"`
	Backfill *BackfillCmd `json:"backfill,omitempty"`
	Release  *ReleaseCmd  `json:"release,omitempty"`
	Admit    *AdmitCmd    `json:"admit,omitempty"`
	// ACL is OpACL's payload (log version 10).
	ACL *acl.Cmd `json:"acl,omitempty"`
}

// ElectedCmd is the first entry a new leader commits; applying it is how
// every replica learns the epoch from the log itself.
type ElectedCmd struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
}

// SetJobsCmd replaces the job set. Hash, if set, is the set's
// jobs.HashSpecs, computed once by the leader that proposed it rather
// than by every replica again (entries without it are hashed when
// applied; a replica that does not know the field hashes, and gets the
// same).
type SetJobsCmd struct {
	// Jobs is allocated once, at its size: every replica decodes a set of
	// 100,000 jobs from the entry.
	Jobs   specjson.List `json:"jobs"`
	Source string        `json:"source"`
	At     time.Time     `json:"at"`
	Hash   string        `json:"hash,omitempty"`
}

// SetJobsDiffCmd changes the job set by difference (log version 8,
// scheduler/fsm/jobsdiff.go): the jobs in Upsert are added or replace
// the job of their name, the jobs named in Remove leave, every other job
// stays as it is. It applies only to the set whose hash is Base; Hash is
// the resulting set's jobs.HashSpecs, computed by the leader. A large
// difference travels in Parts entries, numbered by Part from 0, each of
// a bounded size, in any order; the set changes when all are applied.
type SetJobsDiffCmd struct {
	Base   string      `json:"base"`
	Upsert []jobs.Spec `json:"upsert,omitempty"`
	Remove []string    `json:"remove,omitempty"`
	Hash   string      `json:"hash"`
	Source string      `json:"source"`
	At     time.Time   `json:"at"`
	Part   int         `json:"part,omitempty"`
	Parts  int         `json:"parts,omitempty"`
}

// JobsStage is a job set difference arriving in parts: what its parts
// applied so far carry (scheduler/fsm/jobsdiff.go). Got says which parts
// those are. Upsert holds the parts' jobs by address, in the arrays their
// entries were decoded into, and never writes them: the jobs of 100,000
// copied part by part into one growing array were some 80 MB of memory
// touched for the first time, a third of a second here.
type JobsStage struct {
	Base   string       `json:"base"`
	Hash   string       `json:"hash"`
	Parts  int          `json:"parts"`
	Got    []bool       `json:"got"`
	Upsert []*jobs.Spec `json:"upsert,omitempty"`
	Remove []string     `json:"remove,omitempty"`
}

// GrantCmd grants the first attempt of a new run (OpGrant) as DecideGrant
// decides, or records the run as skipped with Reason (OpSkip: the
// leader's own reason, such as no worker matching). Force (version 2)
// overrides the job's overlap policy.
type GrantCmd struct {
	Job         string    `json:"job"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Output      string    `json:"output,omitempty"`
	Worker      string    `json:"worker,omitempty"`
	Trigger     string    `json:"trigger"`
	Force       bool      `json:"force,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
	// Ahead marks a grant proposed before the run's fire time (log
	// version 4, see pregrant.go).
	Ahead bool `json:"ahead,omitempty"`
}

type SkipRangeCmd struct {
	jobs.SkipRange
	At time.Time `json:"at"`
}

// GrantsCmd grants the first attempts of several runs (OpGrants), each as
// a GrantCmd would on its own.
type GrantsCmd struct {
	Grants []GrantCmd `json:"grants"`
}

// SkipRangesCmd records several skip ranges (OpSkipRanges).
type SkipRangesCmd struct {
	Ranges []jobs.SkipRange `json:"ranges"`
	At     time.Time        `json:"at"`
}

// CompletesCmd records the completions of several attempts (OpCompletes).
type CompletesCmd struct {
	Completions []Completion `json:"completions"`
}

// AdmitCmd grants the first attempt of an admitted run to Worker.
type AdmitCmd struct {
	Run    string    `json:"run"`
	Worker string    `json:"worker"`
	At     time.Time `json:"at"`
}

type PauseCmd struct {
	Job    string    `json:"job"`
	Paused bool      `json:"paused"`
	At     time.Time `json:"at"`
}

// NoteCmd records something a worker saw about its attempt (SUSPECT, LOST).
type NoteCmd struct {
	Attempt string    `json:"attempt"`
	Kind    string    `json:"kind"`
	Node    string    `json:"node"`
	Detail  string    `json:"detail"`
	At      time.Time `json:"at"`
}

// AuditCmd records something a node saw that concerns no run, such as a
// client locked out of its login (jobs.EventLoginFailed).
type AuditCmd struct {
	Kind   string    `json:"kind"`
	Node   string    `json:"node"`
	Detail string    `json:"detail"`
	At     time.Time `json:"at"`
}

// ReleaseCmd ends an attempt's lease now (OpRelease).
type ReleaseCmd struct {
	Attempt string    `json:"attempt"`
	Reason  string    `json:"reason"`
	Asker   string    `json:"asker"`
	At      time.Time `json:"at"`
}

// ConfirmStartsCmd confirms that the workers of attempts granted ahead
// (Attempt.StartInLog) may start them (OpConfirmStarts): the leader
// answers a worker's request to start only once it is applied.
type ConfirmStartsCmd struct {
	Attempts []string  `json:"attempts"`
	At       time.Time `json:"at"`
}

// StartsCmd records the starts of several attempts (OpStarts).
type StartsCmd struct {
	Starts []StartCmd `json:"starts"`
}

// FollowCmd rides on the entries of completions (complete, completes),
// which may finish runs: the worker the leader chose for each job that may
// follow one of them, the output key it rendered for each run that may
// follow (version 7: a template is never executed inside Apply), and the
// time of the proposal.
type FollowCmd struct {
	Workers map[string]string `json:"workers,omitempty"`
	// Outputs are by the id of the run that may follow; a job without an
	// output template has none.
	Outputs map[string]FollowOutput `json:"outputs,omitempty"`
	At      time.Time               `json:"at"`
}

// FollowOutput is the output key the leader rendered for a run that may
// follow, or why it did not render.
type FollowOutput struct {
	Key string `json:"key,omitempty"`
	Err string `json:"err,omitempty"`
}

type StartCmd struct {
	Attempt string    `json:"attempt"`
	At      time.Time `json:"at"`
}

// ExpireCmd takes an attempt's lease away (State lost) or cancels it
// (State cancelled), and if Worker is set and the job allows another
// attempt, grants the run's next attempt to Worker in the same entry.
type ExpireCmd struct {
	Attempt string     `json:"attempt"`
	State   jobs.State `json:"state"`
	Reason  string     `json:"reason"`
	Worker  string     `json:"worker,omitempty"`
	At      time.Time  `json:"at"`
	// NeverStarted is the leader's word that the attempt's process never
	// started (log version 5, startconfirm.go); Apply decides whether
	// the attempt then counts against the job's retries.
	NeverStarted bool `json:"never_started,omitempty"`
	// BeforeStart says the lease that ran out was the short one an
	// attempt holds until its start (log version 8,
	// scheduler/fsm/prestart.go): Apply refuses the expiry unless
	// DecidePreStartExpiry allows it.
	BeforeStart bool `json:"before_start,omitempty"`
}

// RetryCmd grants the next attempt of a run whose attempt number After
// ended without success.
type RetryCmd struct {
	Run    string    `json:"run"`
	After  int       `json:"after"`
	Worker string    `json:"worker"`
	At     time.Time `json:"at"`
}

// Completion is what a worker reports when an attempt ends. Reporting the
// same completion twice is harmless.
type Completion struct {
	Attempt      string     `json:"attempt"`
	Node         string     `json:"node,omitempty"`
	State        jobs.State `json:"state"`
	ExitCode     *int       `json:"exit_code,omitempty"`
	Signal       string     `json:"signal,omitempty"`
	StoreOutcome string     `json:"store_outcome,omitempty"`
	StoreVersion uint64     `json:"store_version,omitempty"`
	Error        string     `json:"error,omitempty"`
	StderrTail   string     `json:"stderr_tail,omitempty"`
	StartedAt    time.Time  `json:"started_at,omitzero"`
	EndedAt      time.Time  `json:"ended_at"`
	// AcceptedAt is when the worker received the dispatch (version 3).
	AcceptedAt time.Time `json:"accepted_at,omitzero"`
	// StdoutTail is the end of stdout when it was not published (version
	// 4; see output.go).
	StdoutTail string `json:"stdout_tail,omitempty"`
	// NeverStarted is the worker's word that it gave the attempt up
	// before starting its process (version 5; see startconfirm.go).
	NeverStarted bool `json:"never_started,omitempty"`
	// HTTPStatus and ResponseBytes are an HTTP job's response status and
	// body size (version 8).
	HTTPStatus    int   `json:"http_status,omitempty"`
	ResponseBytes int64 `json:"response_bytes,omitempty"`
}

// BackfillCmd queues fire times of a job for backfill runs (op
// "backfill", log version 4).
type BackfillCmd struct {
	Job        string      `json:"job"`
	Times      []time.Time `json:"times"`
	From       time.Time   `json:"from"`
	To         time.Time   `json:"to"`
	MaxRunning int         `json:"max_running"`
	At         time.Time   `json:"at"`
	// By names who asked (log version 10), for the audit trail.
	By string `json:"by,omitempty"`
}

// NotifiedCmd records the outcome of notices the leader sent (or gave
// up on).
type NotifiedCmd struct {
	Deliveries []Delivery `json:"deliveries"`
	At         time.Time  `json:"at"`
}

// logVersionText is LogVersion as text, so that a test can build a binary
// of an older format with -ldflags
// "-X github.com/fencecron/fencecron/scheduler/replicated.logVersionText=1".
var logVersionText = "11"

// LogVersion is the newest log and snapshot format this binary reads, and
// the one it writes.
var LogVersion = mustVersion(logVersionText)

func mustVersion(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		panic(fmt.Sprintf("replicated: log version %q is not a positive integer", s))
	}
	return v
}

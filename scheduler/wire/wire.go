// Package wire holds the JSON shapes of fencecron's HTTP answers and the
// node's table of errors to wire codes and back, built on the store's
// codes (fencedstore/errcode).
//
// The shapes are what web serves on /api/v1 and what its clients read:
// the CLI (cmd/fencecron), the test tools (cmd/internal/localcluster,
// cmd/fencecheck, whole-binary tests) and the node-to-node transport
// (scheduler/rpc), which asks servers who leads. They live apart from web
// so a client imports a few types, not the server, its templates and its
// router. The package sits under web because web owns this contract;
// jobs cannot hold it, since the shapes embed election's members and the
// scheduler's job-set summary, and jobs imports nothing of ours.
//
// Changing a field's JSON name here changes the public API.
package wire

import (
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/notify"
)

// Status is the answer of GET /api/v1/status.
type Status struct {
	Node       string `json:"node"`
	RaftState  string `json:"raft_state"`
	Leader     string `json:"leader"`
	LeaderAddr string `json:"leader_addr,omitempty"`
	// NoLeader says why there may be no leader, when this node knows
	// none: a peer with another cluster.secret, too few servers seen to
	// bootstrap, ...
	NoLeader string `json:"no_leader,omitempty"`
	// Epoch is the term of the last leader whose election entry this node
	// has applied, and EpochOf that leader.
	Epoch   uint64 `json:"epoch"`
	EpochOf string `json:"epoch_leader,omitempty"`
	// Jobs is the job set the cluster runs; ConfigHash is the hash of this
	// node's own config file's jobs, and Drifted says they differ.
	Jobs       fsm.JobSetInfo   `json:"jobs"`
	ConfigHash string           `json:"config_hash,omitempty"`
	Drifted    bool             `json:"drifted"`
	Members    []MemberStatus   `json:"members"`
	Voters     []election.Voter `json:"voters"`
	// Notify is the leader's notification sender; only the leader, which
	// sends, answers with it.
	Notify *NotifyStatus `json:"notify,omitempty"`
	// Overload, while the cluster sheds fire times because every worker
	// a job may run on holds its limit of open attempts (and until
	// jobs.OverloadQuiet after the last), says since when and how many.
	Overload *OverloadStatus `json:"overload,omitempty"`
}

// OverloadStatus is a cluster's overload: since when it has shed fire
// times, the last one, and how many.
type OverloadStatus struct {
	Since   time.Time `json:"since"`
	Last    time.Time `json:"last"`
	Skipped uint64    `json:"skipped"`
}

// NotifyStatus is the leader's notification sender: its targets, those
// backing off first.
type NotifyStatus struct {
	Targets []notify.Target `json:"targets"`
}

// LeaderHTTP returns the HTTP address of the leader st names, from its
// member list; "" if st names no leader or gossip has not heard its
// address.
func (st Status) LeaderHTTP() string {
	if st.Leader == "" {
		return ""
	}
	for _, m := range st.Members {
		if m.Name == st.Leader {
			return m.Meta.HTTPAddr
		}
	}
	return ""
}

// MemberStatus is a gossip member as the API shows it.
type MemberStatus struct {
	election.Member
	Drifted bool `json:"drifted"`
}

// Job is a job spec as the API shows it (GET /api/v1/jobs/{name}).
type Job struct {
	jobs.Spec
	// Namespace is the job's namespace, "default" included (the spec's
	// own field, which it hides, is empty for the default one).
	Namespace string    `json:"namespace"`
	NextFire  time.Time `json:"next_fire,omitzero"`
	LastRun   *jobs.Run `json:"last_run,omitempty"`
	// Redacted says the spec's secrets are hidden (jobs.Redact): the
	// reader holds no API token.
	Redacted bool `json:"redacted,omitempty"`
}

// JobList is the answer of GET /api/v1/jobs: one page of jobs in name
// order. Next, if set, is the cursor of the next page (the request's
// `cursor` parameter); a set that fits one page has none, and is the
// whole answer.
type JobList struct {
	Jobs []Job  `json:"jobs"`
	Next string `json:"next,omitempty"`
	// Matched counts the jobs matching the request's search; Total the
	// jobs of the set.
	Matched int `json:"matched"`
	Total   int `json:"total"`
}

// RunList is the answer of GET /api/v1/runs: runs newest scheduled
// first, and Next, the cursor of the next (older) page, passed back as
// cursor=; empty when there is none.
type RunList struct {
	Runs []jobs.Run `json:"runs"`
	Next string     `json:"next"`
}

// EventList is the JSON answer of GET /api/v1/events: audit entries in
// order (the newest that match, oldest first), the cluster's counters,
// and Next, the cursor of the page of older events; empty when there is
// none.
type EventList struct {
	Events   []jobs.Event      `json:"events"`
	Counters map[string]uint64 `json:"counters"`
	Next     string            `json:"next"`
}

// SkipList is the answer of GET /api/v1/skips.
type SkipList struct {
	Skips []jobs.SkipRange `json:"skips"`
}

// JobSet is the answer of GET /api/v1/jobset: the applied job set.
type JobSet struct {
	Info fsm.JobSetInfo `json:"info"`
	Jobs []jobs.Spec    `json:"jobs"`
	// OperatorPaused, with ?applied=true, are the jobs paused by an
	// operator, whose specs then show paused as applied.
	OperatorPaused []string `json:"operator_paused,omitempty"`
	// Namespaces, for a token limited to some namespaces, are those
	// whose jobs it holds (globs): the caller may apply those only, and
	// an apply of it replaces their jobs alone. Absent: the whole set.
	Namespaces []string `json:"namespaces,omitempty"`
}

// JobSetRequest is the body of PUT /api/v1/jobset.
type JobSetRequest struct {
	Source string      `json:"source"`
	Jobs   []jobs.Spec `json:"jobs"`
}

// JobSetDigests is the body of PUT /api/v1/jobset/digests: a job set
// given as each job's name and digest (jobs.SpecDigests), in the order of
// the set, and the specs of those jobs the node said it lacks. The node
// takes every other job from its own set, by digest, and applies the set
// as PUT /api/v1/jobset would. A one-job change among 100,000 jobs so
// sends some 5 MiB of digests and one spec, rather than the 32 MiB set.
type JobSetDigests struct {
	Source string      `json:"source"`
	Jobs   []JobDigest `json:"jobs"`
	Specs  []jobs.Spec `json:"specs,omitempty"`
}

// JobDigest is a job of a JobSetDigests.
type JobDigest struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// JobSetDigestsAnswer is the answer of PUT /api/v1/jobset/digests: the
// set applied, or the jobs whose specs the node lacks (none applied).
type JobSetDigestsAnswer struct {
	Applied *JobSetApplied `json:"applied,omitempty"`
	Need    []string       `json:"need,omitempty"`
}

// JobSetApplied is the answer of PUT /api/v1/jobset.
type JobSetApplied struct {
	Hash   string `json:"hash"`
	Source string `json:"source"`
	Jobs   int    `json:"jobs"`
	// Namespaces, for a token limited to some namespaces, are those whose
	// jobs the apply replaced (globs); every other namespace's jobs were
	// kept. Absent when the apply replaced the whole set.
	Namespaces []string `json:"namespaces,omitempty"`
}

// Paused is the answer of POST /api/v1/jobs/{name}/pause and resume.
type Paused struct {
	Job    string `json:"job"`
	Paused bool   `json:"paused"`
}

// BackfillBody is the JSON of POST /api/v1/jobs/{name}/backfill. From and
// To are RFC 3339 times, or a date (2006-01-02) or a wall-clock time
// without offset (2006-01-02T15:04) read in the job's time zone.
type BackfillBody struct {
	From       string `json:"from"`
	To         string `json:"to"`
	DryRun     bool   `json:"dry_run,omitempty"`
	MaxRunning int    `json:"max_running,omitempty"`
}

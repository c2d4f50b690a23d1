package worker

import (
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// Assignment is what the leader hands a worker: one attempt of one run.
type Assignment struct {
	Run     jobs.Run     `json:"run"`
	Attempt jobs.Attempt `json:"attempt"`
	Spec    jobs.Spec    `json:"spec"`
	// TraceParent is the W3C trace context of the leader's "dispatched"
	// span, when tracing is on: the worker's spans of the attempt are its
	// children (scheduler/runtrace). Never in the replicated log.
	TraceParent string `json:"traceparent,omitempty"`
}

// TokenExpires returns when the attempt's fence token stops being good:
// jobs.Spec.TokenExpiry of its replicated grant time, or of its fire time
// if it was granted ahead of it (StartAt), so the wait before the fire
// time takes nothing from the job's timeout. The job's signed
// FENCECRON_TOKEN and the worker's own establish and publish carry it.
func (a Assignment) TokenExpires() time.Time {
	from := a.Attempt.GrantedAt
	if start := a.StartAt(); start.After(from) {
		from = start
	}
	return a.Spec.TokenExpiry(from)
}

// Scope is what the attempt's token may write: keys under the literal
// directory of its output template, or under "<job>/" for a job without an
// output or whose template has none (jobs.Spec.OutputPrefix): never the
// whole store.
func (a Assignment) Scope() fencedstore.Scope {
	return fencedstore.Scope{Job: a.Run.Job, Prefix: a.Spec.OutputPrefix()}
}

// SignedToken is the attempt's token as its job gets it, to be signed:
// with its attempt id, its scope and its expiry.
func (a Assignment) SignedToken() fencedstore.SignedToken {
	return fencedstore.SignedToken{
		Token:   a.Attempt.Token,
		Attempt: a.Attempt.ID,
		Scope:   a.Scope(),
		Expires: a.TokenExpires(),
	}
}

// RenewReply is the leader's answer to a lease renewal.
type RenewReply struct {
	// Held is false when the attempt is definitely not the worker's any
	// more (expired, superseded, finished): the worker must stop.
	Held   bool          `json:"held"`
	TTL    jobs.Duration `json:"ttl"`
	Reason string        `json:"reason,omitempty"`
	// Started confirms the start the renewal asked for (Renewal.Start):
	// the worker may start the attempt's process (scheduler/startconfirm.go).
	Started bool `json:"started,omitempty"`
}

// PreGrantLead is how long before a run's fire time the leader grants it.
// It covers the grant's commit, the dispatch, the establish and the lease
// confirmation at a few hundred fires a second on a small machine (their
// p99 together was ~450 ms at 100 fires/s before grants ahead), and is
// short enough that a job firing every second with overlap forbid usually
// has its previous run completed when the next is granted. It is capped
// by a quarter of the job's lease TTL (LeadFor), so waiting is a small
// part of what the lease covers.
const PreGrantLead = 500 * time.Millisecond

// LeadFor is how long before a fire time the leader grants spec's runs.
func LeadFor(spec jobs.Spec) time.Duration {
	return min(PreGrantLead, spec.Lease()/4)
}

// StartAt returns when the worker may start the attempt's process: the
// run's fire time (its scheduled time plus the job's jitter) for a
// scheduled run, which a grant ahead precedes; zero (at once) otherwise.
func (a Assignment) StartAt() time.Time {
	if a.Run.Trigger != "schedule" {
		return time.Time{}
	}
	return a.Run.ScheduledAt.Add(a.Spec.JitterFor(a.Run.ScheduledAt))
}

// startConfirmLead is the least time before an attempt's fire time its
// worker asks the leader to confirm the start: about a renewal's round
// trip on an idle node, and for a run granted ahead the commit of the
// confirmation's entry (a few ms on a LAN). A worker whose asks are
// answered later asks earlier, up to maxStartLead (startlead.go).
const startConfirmLead = 25 * time.Millisecond

// Renewal is one attempt's renewal in a RenewMany.
type Renewal struct {
	Attempt string
	// Start asks the leader to confirm that the worker starts the
	// attempt's process now (RenewReply.Started).
	Start bool
	// Confirming says the worker asks before starting: a leader may
	// then take a lease that ran out without Start for an attempt that
	// never started.
	Confirming bool
	// PreStart says the worker holds the attempt on its short lease
	// before the start (jobs.Spec.PreStartLease), renews it at a third of
	// that once it has been confirmed (the first renewal of a run granted
	// ahead may be its start's ask), and will not start on a renewal older
	// than that: the leader may give it no more than the short lease until
	// it confirms the start (scheduler/fsm/prestart.go).
	PreStart bool
}

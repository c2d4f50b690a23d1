// Package rpc is the transport between the nodes of a cluster: what a
// node that does not lead asks of the leader (scheduler.Forwarder: job
// sets, triggers, pauses, a worker's reports and lease renewals) and the
// leader's assignments to workers (scheduler.Dispatcher).
//
// It runs over HTTPS on each node's HTTP port, under Prefix, which web
// mounts but does not interpret: web serves people (the dashboard and the
// public API), this package serves nodes. Both ends prove they are nodes
// of the cluster with its certificates (election/clustertls): the Server
// refuses a caller without one, and the Client checks, where gossip knows
// who listens at an address, that it reached the node it meant to.
//
// Every call is typed, one endpoint per Forwarder method plus dispatch:
// a JSON request the Server decodes strictly (no unknown fields, bounded
// size) and hands to the leader's scheduler.Forwarder, which re-validates
// it; no encoded log command crosses the wire. Errors travel as
// errcode.Body, coded by the one table in scheduler/wire (built on the
// store's codes in fencedstore/errcode). The Client reads a
// domain error (no such attempt, unknown job, not the leader) only from
// that structured body: an answer without one (a proxy's page, another
// server's 404) is a failure of the transport, retried like a lost
// connection, never taken for the leader's word.
package rpc

import (
	"time"

	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/specjson"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// Prefix is the path under which the Server answers; web routes every
// request under it to the Server.
const Prefix = "/internal/v1"

// Paths of the calls, under Prefix.
const (
	pathSetJobs = "/set_jobs"
	// pathSetJobsChanges is a job set given as changes
	// (scheduler.Forwarder.SetJobsChanges); a leader of an older version
	// answers 404, and the client then has the set they make sent whole.
	pathSetJobsChanges = "/set_jobs_changes"
	pathTrigger        = "/trigger"
	// pathTriggerAt is a trigger with the time it was asked
	// (scheduler.Forwarder.TriggerAt), by which the leader knows a retry;
	// a leader of an older version answers 404, and the client then
	// triggers through pathTrigger, at the leader's time.
	pathTriggerAt = "/trigger_at"
	pathPause     = "/pause"
	pathStarted   = "/started"
	pathComplete  = "/complete"
	// pathCompleteMany reports several completions
	// (scheduler.Forwarder.CompleteMany); a leader of an older version
	// answers 404, and the client then reports each on its own.
	pathCompleteMany = "/complete_many"
	pathNote         = "/note"
	pathAudit        = "/audit"
	pathRenew        = "/renew"
	// pathRenewMany renews several attempts of one node
	// (scheduler.Forwarder.RenewMany); a leader of an older version
	// answers 404, and the client then renews each on its own.
	pathRenewMany = "/renew_many"
	pathDispatch  = "/dispatch"
	// pathDispatchMany delivers several assignments to one worker
	// (scheduler.Dispatcher.DispatchMany); a node of an older version
	// answers 404, and the leader then dispatches each on its own.
	pathDispatchMany = "/dispatch_many"
	pathRelease      = "/release"
	// pathOutput is a running attempt's output, asked of its worker
	// (worker.Worker.Output).
	pathOutput = "/output"
	// pathTime asks a node for its wall time, which every answer carries
	// in TimeHeader (peerclock.go).
	pathTime = "/time"
	// pathHistoryRange is a server's backfill of its run history from
	// another's (scheduler/history.Store.Range).
	pathHistoryRange = "/history/range"
	// pathRetired is where nodes of an older version sent encoded log
	// commands. It answers "unavailable", never "not found": an older
	// node reads a 404 as the leader's "no such attempt" and would give
	// up a completion for good, where a 503 makes it retry until it is
	// upgraded too.
	pathRetired = "/apply"
)

// maxBody bounds a request, and maxSetJobsBody the one call that carries
// a whole job set: as large as PUT /api/v1/jobset takes
// (jobs.MaxSetBytes), with room for the envelope, so that whatever a
// follower accepted reaches the leader.
const (
	// maxDispatchMany bounds the assignments of one dispatch_many call.
	maxDispatchMany = 64
	// maxCompleteMany bounds the completions of one complete_many call.
	maxCompleteMany = worker.MaxCompleteBatch
	// maxRenewMany bounds the attempts of one renew_many call.
	maxRenewMany   = 256
	maxBody        = 8 << 20
	maxSetJobsBody = jobs.MaxSetBytes + 1<<20
)

// Request and reply bodies. A call whose reply carries nothing answers
// with done. Completions, renewal replies and assignments travel as the
// scheduler's own types.
type (
	setJobsRequest struct {
		// Jobs is allocated once, refusing unknown fields as the
		// server's decoder does.
		Jobs   specjson.StrictList `json:"jobs"`
		Source string              `json:"source"`
		// Scope limits the apply to the jobs of these namespaces
		// (globs). Sent only when set: a leader that predates it
		// refuses the field rather than replace the whole set.
		Scope []string `json:"scope,omitempty"`
	}
	setJobsReply struct {
		Hash string `json:"hash"`
	}
	setJobsChangesRequest struct {
		Base   string              `json:"base"`
		Upsert specjson.StrictList `json:"upsert"`
		Remove []string            `json:"remove"`
		Source string              `json:"source"`
	}
	// setJobsChangesReply is the new set's hash and size, or why the
	// leader applied nothing without an error: its set is not the base
	// (Stale), or the changes are to be sent as the set they make
	// (NeedSet).
	setJobsChangesReply struct {
		Hash    string `json:"hash,omitempty"`
		Jobs    int    `json:"jobs,omitempty"`
		Stale   bool   `json:"stale,omitempty"`
		NeedSet bool   `json:"need_set,omitempty"`
	}
	triggerRequest struct {
		Job   string `json:"job"`
		Force bool   `json:"force,omitempty"`
		// At is sent only to pathTriggerAt: a leader that predates it
		// refuses the field.
		At time.Time `json:"at,omitzero"`
	}
	pauseRequest struct {
		Job    string `json:"job"`
		Paused bool   `json:"paused"`
	}
	startedRequest struct {
		Attempt string    `json:"attempt"`
		At      time.Time `json:"at"`
	}
	noteRequest struct {
		Attempt string `json:"attempt"`
		Kind    string `json:"kind"`
		Node    string `json:"node"`
		Detail  string `json:"detail,omitempty"`
	}
	auditRequest struct {
		Kind   string `json:"kind"`
		Node   string `json:"node"`
		Detail string `json:"detail,omitempty"`
	}
	releaseRequest struct {
		Attempt string `json:"attempt"`
		Reason  string `json:"reason"`
		Asker   string `json:"asker"`
	}
	renewRequest struct {
		Attempt string `json:"attempt"`
		Node    string `json:"node"`
	}
	dispatchReply struct {
		Accepted string `json:"accepted"`
	}
	renewManyRequest struct {
		Node     string   `json:"node"`
		Attempts []string `json:"attempts"`
		// Starts, one per attempt, ask for start confirmations; a
		// worker that sends them confirms its starts
		// (worker.Renewal). An older worker sends none.
		Starts []bool `json:"starts,omitempty"`
		// PreStart, one per attempt, say which the worker holds on the
		// short lease before the start (worker.Renewal.PreStart). A
		// worker of a release before short leases sends none.
		PreStart []bool `json:"pre_start,omitempty"`
	}
	completeManyRequest struct {
		Completions []replicated.Completion `json:"completions"`
	}
	// completeManyReply has each completion's error, in order: null
	// where it was recorded.
	completeManyReply struct {
		Errors []*errcode.Body `json:"errors"`
	}
	renewManyReply struct {
		Replies []worker.RenewReply `json:"replies"`
	}
	dispatchManyReply struct {
		Accepted []string `json:"accepted"`
	}
	done struct{}
)

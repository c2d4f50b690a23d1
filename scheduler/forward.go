package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fencecron/fencecron/jobs"
)

// Forwarder carries a command from a node that does not lead to the
// leader, and returns the leader's WireResult. Implementations retry until
// a leader answers or ctx ends; every forwarded command is idempotent, so
// a retry after a lost reply is safe.
type Forwarder interface {
	Forward(ctx context.Context, cmd []byte) (WireResult, error)
	// Trigger asks the leader to start a run of job now.
	Trigger(ctx context.Context, job string) (jobs.Run, error)
	// Renew renews an attempt's lease for node with the leader.
	Renew(ctx context.Context, attempt, node string) (RenewReply, error)
}

// WireResult is an FSM answer on the wire.
type WireResult struct {
	Run     *jobs.Run `json:"run,omitempty"`
	Code    string    `json:"code,omitempty"`
	Message string    `json:"message,omitempty"`
}

// errCodes name the sentinel errors that cross the wire.
var errCodes = map[string]error{
	"duplicate_run": jobs.ErrDuplicateRun,
	"unknown_job":   jobs.ErrUnknownJob,
	"not_found":     jobs.ErrNotFound,
	"stale_attempt": jobs.ErrStaleAttempt,
	"not_leader":    jobs.ErrNotLeader,
	"run_finished":  jobs.ErrRunFinished,
	"invalid":       jobs.ErrInvalidConfig,
}

func toWire(res applyResult, err error) WireResult {
	var w WireResult
	if res.Run.ID != "" {
		run := res.Run
		w.Run = &run
	}
	if err != nil {
		w.Code, w.Message = "error", err.Error()
		for code, sentinel := range errCodes {
			if errors.Is(err, sentinel) {
				w.Code = code
				break
			}
		}
	}
	return w
}

func fromWire(w WireResult) (applyResult, error) {
	var res applyResult
	if w.Run != nil {
		res.Run = *w.Run
	}
	if w.Code == "" {
		return res, nil
	}
	if sentinel, ok := errCodes[w.Code]; ok {
		res.Err = fmt.Errorf("%s (on the leader): %w", w.Message, sentinel)
	} else {
		res.Err = fmt.Errorf("on the leader: %s", w.Message)
	}
	return res, res.Err
}

// forwardable lists the commands a follower may send to the leader.
// Elections and grants are the leader's own and are never forwarded.
var forwardable = map[string]bool{opSetJobs: true, opStart: true, opComplete: true, opPause: true, opNote: true, opAudit: true}

// ApplyForwarded applies a command forwarded by another node. It answers
// with code not_leader if this node does not lead, so the sender can look
// for the leader again.
func (s *Scheduler) ApplyForwarded(ctx context.Context, body []byte) WireResult {
	var c command
	if err := json.Unmarshal(body, &c); err != nil {
		return toWire(applyResult{}, fmt.Errorf("decode forwarded command: %w", jobs.ErrInvalidConfig))
	}
	if !forwardable[c.Op] {
		return toWire(applyResult{}, fmt.Errorf("command %q cannot be forwarded: %w", c.Op, jobs.ErrInvalidConfig))
	}
	if !s.Raft.IsLeader() {
		return toWire(applyResult{}, fmt.Errorf("forwarded %s: %w", c.Op, jobs.ErrNotLeader))
	}
	return toWire(s.applyLocal(ctx, body))
}

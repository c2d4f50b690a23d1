package rpc

import (
	"context"
	"fmt"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// outputSource is what answers for a running attempt's output: the
// node's worker (scheduler.Worker).
type outputSource interface {
	Output(worker.OutputRequest) (worker.LiveOutput, error)
}

// outputTimeout bounds one question for output: a person is waiting.
const outputTimeout = 5 * time.Second

// output answers a node's question for an attempt's output from this
// node's worker.
func (s *Server) output(req worker.OutputRequest) (worker.LiveOutput, error) {
	if err := required("attempt", req.Attempt); err != nil {
		return worker.LiveOutput{}, err
	}
	src, ok := s.Worker.(outputSource)
	if !ok || s.Worker == nil {
		return worker.LiveOutput{}, fmt.Errorf("output of attempt %s: this node runs no jobs: %w", req.Attempt, jobs.ErrNotFound)
	}
	return src.Output(req)
}

// AttemptOutput asks worker for what a running attempt wrote (see
// scheduler.Worker.Output): this node's own worker directly, another's
// over the network, once. An attempt the worker no longer runs answers
// an error wrapping jobs.ErrNotFound.
func (c *Client) AttemptOutput(ctx context.Context, workerID string, req worker.OutputRequest) (worker.LiveOutput, error) {
	if workerID == c.Self {
		if src, ok := c.Local.(outputSource); ok {
			return src.Output(req)
		}
	}
	addr, err := c.NodeHTTP(workerID)
	if err != nil {
		return worker.LiveOutput{}, fmt.Errorf("output of attempt %s: worker %s: %w", req.Attempt, workerID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, outputTimeout)
	defer cancel()
	var out worker.LiveOutput
	if err := c.post(ctx, addr, pathOutput, req, &out); err != nil {
		return worker.LiveOutput{}, err
	}
	return out, nil
}

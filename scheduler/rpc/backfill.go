package rpc

import (
	"context"
	"fmt"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// pathBackfill forwards a backfill request to the leader.
const pathBackfill = "/backfill"

var _ scheduler.Backfiller = (*Client)(nil)

// Backfill implements scheduler.Backfiller.
func (c *Client) Backfill(ctx context.Context, req fsm.BackfillRequest) (fsm.BackfillResult, error) {
	var res fsm.BackfillResult
	err := c.toLeader(ctx, pathBackfill, req, &res)
	return res, err
}

// backfillRoute answers pathBackfill as the leader does.
func (s *Server) backfillRoute() func(context.Context, fsm.BackfillRequest) (fsm.BackfillResult, error) {
	return func(ctx context.Context, req fsm.BackfillRequest) (fsm.BackfillResult, error) {
		if err := required("job", req.Job); err != nil {
			return fsm.BackfillResult{}, err
		}
		b, ok := s.Leader.(scheduler.Backfiller)
		if !ok {
			return fsm.BackfillResult{}, fmt.Errorf("%s: this node has no scheduler: %w", pathBackfill, jobs.ErrNotLeader)
		}
		return b.Backfill(ctx, req)
	}
}

package rpc

import (
	"context"

	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// pathBackfill forwards a backfill request to the leader.
const pathBackfill = "/backfill"

// Backfill implements scheduler.Forwarder.
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
		return s.Leader.Backfill(ctx, req)
	}
}

// pathACL forwards a change of the access control state to the leader.
const pathACL = "/acl"

// ACL implements scheduler.Forwarder.
func (c *Client) ACL(ctx context.Context, cmd acl.Cmd) error {
	return c.toLeader(ctx, pathACL, cmd, nil)
}

// aclRoute answers pathACL as the leader does.
func (s *Server) aclRoute() func(context.Context, acl.Cmd) (done, error) {
	return func(ctx context.Context, cmd acl.Cmd) (done, error) {
		if err := required("action", cmd.Action); err != nil {
			return done{}, err
		}
		return done{}, s.Leader.ACL(ctx, cmd)
	}
}

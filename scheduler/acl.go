package scheduler

import (
	"context"
	"time"

	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// ACL changes the access control state, on the leader (see
// Forwarder.ACL).
func (s *Scheduler) ACL(ctx context.Context, c acl.Cmd) error {
	if s.answersHere() {
		return local{s}.ACL(ctx, c)
	}
	if err := s.Forwarder.ACL(ctx, c); err != nil {
		return err
	}
	// The leader answered once the change was committed; this replica
	// applies it a moment later. Wait for it (bounded), so that the next
	// call here sees it: a bootstrap through a follower, then a policy
	// apply with its token through the same follower, was refused as an
	// unknown token.
	ch, stop := s.FSM.Subscribe()
	defer stop()
	t := time.NewTimer(aclVisibleWithin)
	defer t.Stop()
	for !acl.Shows(s.FSM.ACL(), c) {
		select {
		case <-ch:
		case <-t.C:
			return nil // committed: it shows here once this node catches up
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// aclVisibleWithin bounds a follower's wait for its replica to show an
// access control change it forwarded.
const aclVisibleWithin = 2 * time.Second

// ACL answers Forwarder.ACL as the leader: the change is decided in
// Apply (acl.Decide), whoever sent it; it is checked against the state
// first so that a refusal costs no entry.
func (l local) ACL(ctx context.Context, c acl.Cmd) error {
	if err := l.leads("acl " + c.Action); err != nil {
		return err
	}
	c.At = l.s.now()
	if _, err := acl.Decide(l.s.FSM.ACL(), c); err != nil {
		return err
	}
	_, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpACL, ACL: &c})
	return err
}

package scheduler

import (
	"context"

	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// ACL changes the access control state, on the leader (see
// Forwarder.ACL).
func (s *Scheduler) ACL(ctx context.Context, c acl.Cmd) error {
	if s.answersHere() {
		return local{s}.ACL(ctx, c)
	}
	return s.Forwarder.ACL(ctx, c)
}

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

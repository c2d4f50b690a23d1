package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// ACL changes the access control state, on the leader (see
// Forwarder.ACL).
func (s *Scheduler) ACL(ctx context.Context, c acl.Cmd) error {
	if c.At.IsZero() {
		c.At = s.now() // what a retry of the forward is known by (acl.Repeated)
	}
	if s.answersHere() {
		return local{s}.ACL(ctx, c)
	}
	// A policy this replica holds that the leader finds gone was deleted
	// already: by this request's first try, whose answer was lost (the
	// state does not say who deleted a policy), or by another meanwhile.
	// Either way it is gone, as asked.
	held := false
	if st := s.FSM.ACL(); st != nil && c.Action == acl.ActPolicyDelete {
		_, held = st.Policies[c.Name]
	}
	err := s.Forwarder.ACL(ctx, c)
	if held && errors.Is(err, acl.ErrUnknownPolicy) {
		err = nil
	}
	if err != nil {
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
// first so that a refusal costs no entry. A change the state shows this
// very request made (acl.Repeated: the forward was sent again after its
// answer was lost) is answered as done.
func (l local) ACL(ctx context.Context, c acl.Cmd) error {
	if err := l.leads("acl " + c.Action); err != nil {
		return err
	}
	c.At = requestTime(c.At, l.s.now())
	st := l.s.FSM.ACL()
	if acl.Repeated(st, c) {
		return nil
	}
	if _, err := acl.Decide(st, c); err != nil {
		return err
	}
	_, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpACL, ACL: &c})
	if errors.Is(err, acl.ErrRepeated) {
		return nil // the first copy was committed while this one was on its way
	}
	return err
}

// requestWindow bounds how far the time a node says it took a request
// may be from the leader's clock for the leader to take it as the
// request's time (requestTime).
const requestWindow = time.Minute

// requestTime is the time of a request forwarded to the leader: the time
// the node that took it says (at), which a retry of the forward repeats,
// so that the leader knows the retry for what it is; the leader's clock
// (now) when at is unset, or further from it than requestWindow (a
// node whose clock is that far off is not believed).
func requestTime(at, now time.Time) time.Time {
	if at.IsZero() || at.Before(now.Add(-requestWindow)) || at.After(now.Add(requestWindow)) {
		return now
	}
	return at.UTC()
}

package fsm

import (
	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// applyACL applies an ACL entry (log version 10) as acl.Decide decides:
// refused whole, or the ACL state replaced by the new one and the change
// recorded in the audit trail (by accessor and name, never a secret).
func (f *FSM) applyACL(l *raft.Log, c *acl.Cmd) ApplyResult {
	next, err := acl.Decide(f.st.ACL, *c)
	if err != nil {
		return ApplyResult{Err: err}
	}
	f.st.ACL = next
	f.event(l, jobs.Event{Time: c.At, Kind: jobs.EventACL, Detail: replicated.Clip(c.Describe(), 512)})
	return ApplyResult{}
}

// ACL returns the access control state: nil before the first ACL entry.
// It is never changed in place; callers must not change it.
func (f *FSM) ACL() *acl.State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.ACL
}

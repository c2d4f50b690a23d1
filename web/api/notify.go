package api

import (
	"github.com/fencecron/fencecron/scheduler/notify"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// NotifyTargets is what the leader's notification sender knows of its
// targets (scheduler.Scheduler implements it); ok is false on a node
// that does not lead, which sends nothing. Safe for concurrent use.
type NotifyTargets interface {
	NotifyTargets() (targets []notify.Target, ok bool)
}

// notifyStatus is the sender's part of the status: nil unless this node
// leads (the targets' state lives in the leader's memory only: it is
// how one node's tries went, nothing the replicas must agree on).
func (s *Server) NotifyStatus() *wire.NotifyStatus {
	if s.Notifications == nil {
		return nil
	}
	ts, ok := s.Notifications.NotifyTargets()
	if !ok {
		return nil
	}
	return &wire.NotifyStatus{Targets: nonNil(ts)}
}

// pendingNotices counts the notices of the replicated state, for a node
// that does not lead to say where their targets are shown.
func (s *Server) PendingNotices() int {
	if ns, ok := s.State.(interface{ Notices() []replicated.Notice }); ok {
		return len(ns.Notices())
	}
	return 0
}

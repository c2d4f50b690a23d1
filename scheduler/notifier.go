package scheduler

import (
	"context"

	"github.com/fencecron/fencecron/scheduler/notify"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Notification delivery is package notify's: the leader starts a sender
// for each term, under the term's context, and the term's end stops it.

// notifier is a term's notification delivery as the leader uses it;
// *notify.Sender implements it.
type notifier interface {
	// Run delivers the pending notices until ctx (the term's) ends, and
	// returns once every send it started has ended.
	Run(ctx context.Context)
	// Targets returns the targets it tracks; safe to call at any time,
	// concurrently with Run.
	Targets() []notify.Target
}

// termNotifier returns a new term's notifier: a notify.Sender of the
// FSM's pending notices, which records their outcomes through this
// node's log (s.newNotifier instead, if a test set it).
func (s *Scheduler) termNotifier() notifier {
	if s.newNotifier != nil {
		return s.newNotifier()
	}
	propose := func(ctx context.Context, c replicated.Command) error {
		_, err := s.applyLocalCmd(ctx, c)
		return err
	}
	return notify.New(s.Notify, s.FSM, propose, s.Clock, s.Logger)
}

// startNotifying starts the term's notification delivery on l.wg, under
// l.ctx: it stops when the term ends, and run waits for it. Call it
// before the term is published (s.term), which publishes l.sender.
func (l *leader) startNotifying() {
	n := l.s.termNotifier()
	l.sender = n
	l.wg.Go(func() { n.Run(l.ctx) })
}

// NotifyTargets returns the notification targets this node's sender
// tracks while it leads (ok false when it does not lead: only the
// leader sends): those with notices pending, and those that failed
// within the last hour, the ones backing off first.
func (s *Scheduler) NotifyTargets() (targets []notify.Target, ok bool) {
	l := s.term.Load()
	if l == nil {
		return nil, false
	}
	if l.sender == nil {
		return []notify.Target{}, true
	}
	return l.sender.Targets(), true
}

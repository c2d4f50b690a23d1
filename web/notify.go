package web

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// NotifyTargets is what the leader's notification sender knows of its
// targets (scheduler.Scheduler implements it); ok is false on a node
// that does not lead, which sends nothing. Safe for concurrent use.
type NotifyTargets interface {
	NotifyTargets() (targets []scheduler.NotifyTarget, ok bool)
}

// notifyStatus is the sender's part of the status: nil unless this node
// leads (the targets' state lives in the leader's memory only: it is
// how one node's tries went, nothing the replicas must agree on).
func (s *Server) notifyStatus() *wire.NotifyStatus {
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
func (s *Server) pendingNotices() int {
	if ns, ok := s.State.(interface{ Notices() []fsm.Notice }); ok {
		return len(ns.Notices())
	}
	return 0
}

var (
	notifyBackingOffDesc = prometheus.NewDesc("fencecron_notify_target_backing_off",
		"1 while a notification target (scheme://host) did not answer its last try and is backed off; on the leader only.", []string{"target"}, nil)
	notifyFailuresDesc = prometheus.NewDesc("fencecron_notify_target_failures",
		"Tries in a row the notification target (scheme://host) did not answer; on the leader only.", []string{"target"}, nil)
	notifyPendingDesc = prometheus.NewDesc("fencecron_notify_target_pending",
		"Notifications pending for the target (scheme://host), in flight included; on the leader only.", []string{"target"}, nil)
)

// notifyCollector reads the leader's notification targets at scrape
// time. Targets that share a scheme and host (two Slack webhooks) are one
// series: the worst of them, their notices summed.
type notifyCollector struct{ s *Server }

func (c notifyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- notifyBackingOffDesc
	ch <- notifyFailuresDesc
	ch <- notifyPendingDesc
}

func (c notifyCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.notifyStatus()
	if st == nil {
		return
	}
	type figures struct{ backingOff, failures, pending float64 }
	by := map[string]*figures{}
	var order []string
	for _, t := range st.Targets {
		f := by[t.Target]
		if f == nil {
			f = &figures{}
			by[t.Target] = f
			order = append(order, t.Target)
		}
		f.backingOff = max(f.backingOff, b2f(t.BackingOff))
		f.failures = max(f.failures, float64(t.Failures))
		f.pending += float64(t.Pending)
	}
	for _, name := range order {
		f := by[name]
		ch <- prometheus.MustNewConstMetric(notifyBackingOffDesc, prometheus.GaugeValue, f.backingOff, name)
		ch <- prometheus.MustNewConstMetric(notifyFailuresDesc, prometheus.GaugeValue, f.failures, name)
		ch <- prometheus.MustNewConstMetric(notifyPendingDesc, prometheus.GaugeValue, f.pending, name)
	}
}

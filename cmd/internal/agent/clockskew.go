package agent

import (
	"log/slog"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/rpc"
)

// newSkewMonitor compares the wall clock of the node named self with its
// peers' over the transport between nodes: every answer peers gets is
// observed, and peers no call reached lately are asked. A peer beyond
// maxSkew (cluster.max_clock_skew) is flagged; entries go through sched's
// audit.
func newSkewMonitor(self string, maxSkew time.Duration, clock jobs.Clock, node *election.Node, peers *rpc.Client, sched *scheduler.Scheduler, log *slog.Logger) *scheduler.SkewMonitor {
	m := &scheduler.SkewMonitor{
		Self: self, MaxSkew: maxSkew, Clock: clock, Logger: log,
		Members: func() []string {
			var names []string
			for _, mb := range node.Members() {
				if mb.State == "alive" && mb.Meta.HTTPAddr != "" && mb.Name != self {
					names = append(names, mb.Name)
				}
			}
			return names
		},
		Probe: peers.Probe,
		Audit: sched.Audit,
	}
	peers.Clock, peers.Skew = clock, m
	return m
}

package main

import (
	"log/slog"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/rpc"
)

// newSkewMonitor compares this node's wall clock with its peers' over the
// transport between nodes: every answer peers gets is observed, and peers
// no call reached lately are asked. Entries go through sched's audit.
func newSkewMonitor(o nodeOptions, clock jobs.Clock, node *election.Node, peers *rpc.Client, sched *scheduler.Scheduler, log *slog.Logger) *scheduler.SkewMonitor {
	m := &scheduler.SkewMonitor{
		Self: o.ID, MaxSkew: o.MaxClockSkew, Clock: clock, Logger: log,
		Members: func() []string {
			var names []string
			for _, mb := range node.Members() {
				if mb.State == "alive" && mb.Meta.HTTPAddr != "" && mb.Name != o.ID {
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

package agent

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"time"

	"github.com/fencecron/fencecron/election"
)

// serve runs the started node until ctx ends: SIGHUP reloads its jobs,
// and the memory a replaced job set left behind is handed back. When ctx
// ends it hands leadership over; Run's shutdown then stops the parts.
func (n *node) serve(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	applied, unsubscribe := n.fsm.Subscribe()
	defer unsubscribe()
	setHash := n.fsm.JobSetInfo().Hash
	scavenge := time.NewTimer(time.Hour)
	scavenge.Stop()
	defer scavenge.Stop()
	for {
		select {
		case <-ctx.Done():
			n.handOver()
			n.log.Info("shutting down", "budget", shutdownBudget)
			return nil
		case <-hup:
			n.reload(ctx)
		case <-applied:
			if h := n.fsm.JobSetInfo().Hash; h != setHash {
				setHash = h
				// Once the request that carried the set has been answered
				// and its copies are garbage.
				scavenge.Reset(scavengeAfter)
			}
		case <-scavenge.C:
			scavengeMemory()
		}
	}
}

// handOverBudget bounds a planned stop's hand-over; past it the node
// stops anyway and the cluster elects a leader as after a crash.
const handOverBudget = 3 * time.Second

// handOver is the first step of a planned stop (SIGTERM, Ctrl-C): tell
// gossip this node is leaving and, if it leads, hand leadership to another
// server, so the cluster fires on at once instead of after an election
// timeout.
func (n *node) handOver() {
	ctx, cancel := context.WithTimeout(context.Background(), handOverBudget)
	defer cancel()
	start := time.Now()
	handed, err := n.raft.HandOver(ctx)
	switch {
	case err != nil:
		n.log.Warn("planned stop: could not hand leadership over; the others will elect a leader", "err", err)
	case handed:
		n.log.Info("planned stop: handed leadership over", "took", time.Since(start).Round(time.Millisecond))
	}
}

// scavengeAfter is how long after a new job set is applied its memory is
// handed back (scavengeMemory).
const scavengeAfter = 2 * time.Second

// scavengeMemory hands the memory a new job set left behind back to the
// system, if the process holds more of it than half what it keeps.
// Replacing a set of 100,000 jobs passes several copies of it through the
// heap (the request, the Raft entry, the decoded set, the leader's queue)
// and then keeps one: without this the process would hold the peak, twice
// what it keeps, until the runtime's slow background return. A change to
// a few jobs leaves far less, about what the next change will use again,
// and is not handed back: its pages would be faulted in anew. A job set
// changes rarely, so one full collection then is cheap.
func scavengeMemory() {
	runtime.GC()
	held := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(held)
	if free, live := held[0].Value.Uint64(), held[1].Value.Uint64(); free > live/2 {
		debug.FreeOSMemory()
	}
}

// reload applies this node's config file to the cluster: the operator's
// explicit act (SIGHUP) that overrides the applied job set.
func (n *node) reload(ctx context.Context) {
	if n.opt.Jobs == nil || n.opt.Jobs.Reload == nil {
		n.log.Info("SIGHUP: no config file to reload")
		return
	}
	specs, source, err := n.opt.Jobs.Reload()
	if err != nil {
		n.log.Error("SIGHUP: config not applied; nothing changed", "err", err)
		return
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hash, err := n.sched.SetJobs(actx, specs, source, nil)
	if errors.Is(err, context.DeadlineExceeded) {
		n.log.Error("SIGHUP: no answer within 30s; the config may still be applied: see the job set's hash in fencecron status", "err", err)
		return
	}
	if err != nil {
		n.log.Error("SIGHUP: config not applied; nothing changed", "err", err)
		return
	}
	n.raft.UpdateMeta(func(m *election.Meta) { m.ConfigHash = hash })
	n.log.Info("SIGHUP: applied this node's jobs to the cluster", "source", source, "hash", hash, "jobs", len(specs))
}

package election

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/hashicorp/raft"
)

// bootstrapLoop bootstraps the cluster once, the way Consul does: when a
// server with no Raft state sees BootstrapExpect servers in gossip, none
// of which has Raft state either, it bootstraps with exactly those
// servers. Every server doing so computes the same configuration, and one
// that already belongs to a cluster (a restart, or a wiped node rejoining)
// never starts a second one.
func (n *Node) bootstrapLoop() {
	defer n.wg.Done()
	if n.cfg.BootstrapExpect <= 0 {
		return
	}
	changed := n.members.subscribe()
	for {
		if n.raftHasState() {
			if !n.Meta().HasState {
				n.UpdateMeta(func(m *Meta) { m.HasState = true })
			}
			return
		}
		if servers, ok := n.readyToBootstrap(); ok {
			conf := raft.Configuration{}
			for _, m := range servers {
				conf.Servers = append(conf.Servers, raft.Server{
					Suffrage: raft.Voter, ID: raft.ServerID(m.Name), Address: raft.ServerAddress(m.Meta.RaftAddr),
				})
			}
			err := n.awaitFor(10*time.Second, n.raft.BootstrapCluster(conf))
			switch {
			case errors.Is(err, ErrClosed):
				return
			case errors.Is(err, context.DeadlineExceeded):
				// Not known to have bootstrapped: the next round asks
				// raft whether it holds a configuration now.
				n.log.Warn("bootstrap: no answer from raft in time; looking again", "err", err)
				if !n.waitChange(changed, time.Second) {
					return
				}
				continue
			case err != nil:
				n.log.Warn("bootstrap", "err", err)
			default:
				n.log.Info("bootstrapped the cluster", "servers", len(conf.Servers), "expect", n.cfg.BootstrapExpect)
			}
			n.UpdateMeta(func(m *Meta) { m.HasState = true })
			return
		}
		// Gossip changes wake us; the timer catches a server that was
		// added to a cluster by its leader, which gossip does not show.
		if !n.waitChange(changed, time.Second) {
			return
		}
	}
}

// waitChange waits for a signal on changed or for d, whichever comes
// first; it reports false when the node closes.
func (n *Node) waitChange(changed <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-n.done:
		return false
	}
	return true
}

// raftHasState reports whether this server has a log, a snapshot or a
// configuration: whether it belongs to a cluster already.
func (n *Node) raftHasState() bool {
	if n.raft.LastIndex() > 0 {
		return true
	}
	f := n.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// readyToBootstrap returns the servers to bootstrap with, sorted by name,
// once enough of them are alive and none has state.
func (n *Node) readyToBootstrap() ([]Member, bool) {
	var servers []Member
	for _, m := range n.members.list() {
		if m.State != "alive" || m.Meta.Role != RoleServer {
			continue
		}
		if m.Meta.HasState {
			n.log.Info("a server already has raft state; waiting to be added to its cluster instead of bootstrapping", "server", m.Name)
			return nil, false
		}
		if m.Meta.Expect != n.cfg.BootstrapExpect {
			n.log.Error("servers disagree on bootstrap_expect; not bootstrapping", "server", m.Name, "theirs", m.Meta.Expect, "ours", n.cfg.BootstrapExpect)
			return nil, false
		}
		servers = append(servers, m)
	}
	if len(servers) < n.cfg.BootstrapExpect {
		return nil, false
	}
	sort.Slice(servers, func(i, j int) bool { return servers[i].Name < servers[j].Name })
	return servers, true
}

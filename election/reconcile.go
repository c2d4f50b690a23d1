package election

import (
	"time"

	"github.com/hashicorp/raft"
)

// reconcileLoop keeps the voter set in step with gossip while this node
// leads: alive servers missing from the configuration are added as voters,
// and servers gone from gossip longer than ReapAfter are removed, never
// taking the voter count below BootstrapExpect.
func (n *Node) reconcileLoop() {
	defer n.wg.Done()
	gone := map[string]time.Time{} // voter id -> first seen missing
	changed := n.members.subscribe()
	for {
		if n.IsLeader() {
			n.reconcile(gone)
		} else {
			clear(gone)
		}
		t := time.NewTimer(n.profile.reconcileEvery)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
		case <-n.done:
			t.Stop()
			return
		}
	}
}

// configChangeWait bounds the queueing of a voter change the leader
// makes on its own, and again the wait for its commit.
const configChangeWait = 5 * time.Second

func (n *Node) reconcile(gone map[string]time.Time) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	conf := f.Configuration()
	inConf := map[string]raft.Server{}
	voters := 0
	for _, s := range conf.Servers {
		inConf[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	alive := map[string]Member{}
	for _, m := range n.members.list() {
		if m.Meta.Role == RoleServer && m.Meta.RaftAddr != "" && (m.State == "alive" || m.State == "suspect") {
			alive[m.Name] = m
		}
	}

	for id, m := range alive {
		s, ok := inConf[id]
		if ok && string(s.Address) == m.Meta.RaftAddr {
			continue
		}
		if ok {
			n.log.Info("server changed its raft address; replacing it", "server", id, "old", s.Address, "new", m.Meta.RaftAddr)
		} else {
			n.log.Info("adding server as voter", "server", id, "raft", m.Meta.RaftAddr)
		}
		if err := n.awaitFor(configChangeWait, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(m.Meta.RaftAddr), 0, configChangeWait)); err != nil {
			n.log.Warn("add voter", "server", id, "err", err)
		}
	}

	now := time.Now()
	floor := max(n.cfg.BootstrapExpect, 1)
	for id, s := range inConf {
		if id == n.cfg.NodeID {
			continue
		}
		if _, ok := alive[id]; ok {
			delete(gone, id)
			continue
		}
		since, ok := gone[id]
		if !ok {
			gone[id] = now
			continue
		}
		if now.Sub(since) < n.cfg.ReapAfter {
			continue
		}
		if s.Suffrage == raft.Voter && voters-1 < floor {
			continue
		}
		n.log.Warn("removing server gone from gossip", "server", id, "gone_for", now.Sub(since).Round(time.Second))
		if err := n.awaitFor(configChangeWait, n.raft.RemoveServer(raft.ServerID(id), 0, configChangeWait)); err != nil {
			// The removal may yet commit: counted as not done, the
			// next gone voter could take the count below the floor. The
			// next round reads the configuration again.
			n.log.Warn("remove server", "server", id, "err", err)
			return
		}
		delete(gone, id)
		if s.Suffrage == raft.Voter {
			voters--
		}
	}
}

package election

import (
	"slices"

	"github.com/fencecron/fencecron/election/clustertls"
)

// Rolling the cluster secret without an outage. A node configured with a
// new secret and the previous one accepts both everywhere, and TLS needs
// no more (clustertls cross-signs the new CA with the old). What a node
// sends with — the gossip key, and through UseNewSecret the key tokens
// are signed with — must be readable by every member, so it stays the
// previous secret until gossip shows every member accepting the new one.
// The roll is then two steps, each done one node at a time: give every
// node the new secret with the old as previous_secret; then drop
// previous_secret everywhere.

// useNewSecret reports whether every member that may still be running
// (alive or suspect) accepts the secret with fingerprint fp. Members that
// are dead or gone do not hold a roll up.
func useNewSecret(fp string, members []Member) bool {
	for _, m := range members {
		if m.State != "alive" && m.State != "suspect" {
			continue
		}
		if !slices.Contains(m.Meta.Secrets, fp) {
			return false
		}
	}
	return true
}

// secretLoop follows gossip during a roll and switches what this node
// sends with, in both directions: a member that comes back with only the
// old secret switches the cluster back until it is rolled too.
func (n *Node) secretLoop() {
	defer n.wg.Done()
	if len(n.cfg.PreviousSecret) == 0 || n.keyring == nil {
		return
	}
	// Before joining, the member table holds only this node, and "every
	// member accepts the new secret" would be true of nobody else.
	select {
	case <-n.joined:
	case <-n.done:
		return
	}
	fp := clustertls.Fingerprint(n.cfg.Secret)
	changed := n.members.subscribe()
	usingNew := false
	for {
		if want := useNewSecret(fp, n.Members()); want != usingNew {
			key := gossipKey(n.cfg.PreviousSecret)
			if want {
				key = gossipKey(n.cfg.Secret)
			}
			if err := n.keyring.UseKey(key); err != nil {
				n.log.Error("secret roll: cannot switch the gossip key", "err", err)
			} else {
				usingNew = want
				if want {
					n.log.Info("secret roll: every member accepts the new cluster secret; sending with it now (previous_secret may be removed once every node does so)")
				} else {
					n.log.Warn("secret roll: a member accepts only the previous cluster secret; sending with that one again")
				}
				if n.cfg.UseNewSecret != nil {
					n.cfg.UseNewSecret(want)
				}
			}
		}
		select {
		case <-changed:
		case <-n.done:
			return
		}
	}
}

package election

import (
	"slices"
	"sync/atomic"
	"time"

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
// accepts the secret with fingerprint fp: the alive and the suspect, and
// the dead (a crashed node may come back as it was) until they have been
// gone for reapAfter, when the leader stops counting them as voters too.
// Members that left on purpose do not hold a roll up: a node is stopped
// during a roll to be rolled.
func useNewSecret(fp string, members []Member, reapAfter time.Duration, now time.Time) bool {
	for _, m := range members {
		switch {
		case m.State == "left", m.State == "dead" && now.Sub(m.Since) >= reapAfter:
			continue
		}
		if !slices.Contains(m.Meta.Secrets, fp) {
			return false
		}
	}
	return true
}

// gossipKeys records which secret's key gossip sends with: joinLoop
// may switch it to get into a cluster that no longer reads the other.
type gossipKeys struct{ usesNew atomic.Bool }

// useGossipKey makes gossip send with the new secret's key or the
// previous one's.
func (n *Node) useGossipKey(useNew bool) error {
	key := gossipKey(n.cfg.PreviousSecret)
	if useNew {
		key = gossipKey(n.cfg.Secret)
	}
	if err := n.keyring.UseKey(key); err != nil {
		return err
	}
	n.gossipKeys.usesNew.Store(useNew)
	return nil
}

// rollAfterFailedJoin, during a roll, tries the other gossip key for the
// next join: a node that restarts with both secrets when every seed it
// reaches has only the new one would otherwise never be heard, and never
// learn that it may switch (secretLoop corrects the choice once joined).
func (n *Node) rollAfterFailedJoin() {
	if len(n.cfg.PreviousSecret) == 0 || n.keyring == nil {
		return
	}
	if err := n.useGossipKey(!n.gossipKeys.usesNew.Load()); err != nil {
		n.log.Error("secret roll: cannot switch the gossip key", "err", err)
	}
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
	signsNew := false // what UseNewSecret was last told; it starts with the previous secret
	for {
		want := useNewSecret(fp, n.Members(), n.cfg.ReapAfter, time.Now())
		if want != signsNew || want != n.gossipKeys.usesNew.Load() {
			if err := n.useGossipKey(want); err != nil {
				n.log.Error("secret roll: cannot switch the gossip key", "err", err)
			} else {
				if want != signsNew {
					if want {
						n.log.Info("secret roll: every member accepts the new cluster secret; sending with it now (previous_secret may be removed once every node does so)")
					} else {
						n.log.Warn("secret roll: a member accepts only the previous cluster secret; sending with that one again")
					}
					if n.cfg.UseNewSecret != nil {
						n.cfg.UseNewSecret(want)
					}
				}
				signsNew = want
			}
		}
		// Dead members stop counting after a while without any gossip
		// about them: look again then, too.
		if !n.waitChange(changed, time.Minute) {
			return
		}
	}
}

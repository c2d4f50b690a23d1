package election

import (
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// Timeout profiles a config can select.
const (
	ProfileDefault = "default"
	ProfileFast    = "fast"
)

// profile is one set of Raft and gossip timeouts. Raft notices a dead
// leader from heartbeats; gossip is slower to declare a member dead and is
// used only for membership, never for ownership.
type profile struct {
	heartbeat, election, leaderLease, commit time.Duration
	logStoreTimeout                          time.Duration
	fastGossip                               bool
	reconcileEvery                           time.Duration
	// pushPull is how often a node swaps its whole member table with a
	// random peer. Gossip broadcasts reach a small cluster through only a
	// few random transmissions, and now and then miss a node; this full
	// exchange is what repairs that, so it bounds how long a node can miss
	// a new leader, a new member or its HTTP address. memberlist's defaults
	// (30s, 15s) are sized for thousands of nodes; ours are a few, for
	// whom one exchange is a few kilobytes. memberlist itself slows it
	// down past 32 members.
	pushPull time.Duration
}

func profileNamed(name string) (profile, error) {
	switch name {
	case "", ProfileDefault:
		// A follower notices a silent leader one to two heartbeat
		// timeouts after its last contact. It cannot win alone: the other
		// follower refuses to vote (pre-vote and vote) while it still
		// has a leader, and the first candidate then waits a whole
		// election timeout; so a three-server cluster elects when the
		// later of the two followers notices, whose median is about 1.7
		// heartbeat timeouts. With 500ms the median from a SIGSTOP of the
		// leader (a host gone silent) to the new epoch was about 0.8–1.1 s
		// on an idle 2-core machine (fencebench failover -signal stop),
		// and the timeout still tolerates GC pauses and loaded hosts of a
		// few hundred milliseconds. A leader whose process died on a host
		// that is up is replaced sooner (crashwatch.go).
		//
		// The leader lease is as long as Raft allows (the heartbeat
		// timeout): a leader that has not heard from a quorum for that
		// long steps down. At 300ms, a leader of a saturated host (500
		// runs a second on two cores) stepped down every few seconds on
		// its own stalls, and each election cost the cluster a second of
		// work. Nothing depends on a shorter lease for safety: every
		// token is minted in the log, and fenced at the store.
		return profile{
			heartbeat: 500 * time.Millisecond, election: 500 * time.Millisecond, leaderLease: 500 * time.Millisecond,
			commit: 50 * time.Millisecond, logStoreTimeout: 5 * time.Second,
			reconcileEvery: 2 * time.Second, pushPull: 5 * time.Second,
		}, nil
	case ProfileFast:
		return profile{
			heartbeat: 150 * time.Millisecond, election: 150 * time.Millisecond, leaderLease: 100 * time.Millisecond,
			commit: 10 * time.Millisecond, logStoreTimeout: time.Second,
			fastGossip: true, reconcileEvery: 500 * time.Millisecond, pushPull: 2 * time.Second,
		}, nil
	}
	return profile{}, fmt.Errorf("unknown profile %q: want %q or %q", name, ProfileDefault, ProfileFast)
}

func (p profile) applyRaft(c *raft.Config) {
	c.HeartbeatTimeout = p.heartbeat
	c.ElectionTimeout = p.election
	c.LeaderLeaseTimeout = p.leaderLease
	c.CommitTimeout = p.commit
}

func (p profile) memberlistConfig() *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	if p.fastGossip {
		c = memberlist.DefaultLocalConfig()
		// Local's 2 transmissions per broadcast are too few for a cluster
		// of five or six: LAN's 4.
		c.RetransmitMult = 4
	}
	c.PushPullInterval = p.pushPull
	return c
}

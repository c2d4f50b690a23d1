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
}

func profileNamed(name string) (profile, error) {
	switch name {
	case "", ProfileDefault:
		// Raft notices a silent leader between one and about three
		// heartbeat timeouts after its last contact; 600ms keeps the
		// median failover near a second while tolerating GC pauses and
		// loaded hosts of a few hundred milliseconds.
		return profile{
			heartbeat: 600 * time.Millisecond, election: 600 * time.Millisecond, leaderLease: 300 * time.Millisecond,
			commit: 50 * time.Millisecond, logStoreTimeout: 5 * time.Second,
			reconcileEvery: 2 * time.Second,
		}, nil
	case ProfileFast:
		return profile{
			heartbeat: 150 * time.Millisecond, election: 150 * time.Millisecond, leaderLease: 100 * time.Millisecond,
			commit: 10 * time.Millisecond, logStoreTimeout: time.Second,
			fastGossip: true, reconcileEvery: 500 * time.Millisecond,
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
	if p.fastGossip {
		return memberlist.DefaultLocalConfig()
	}
	return memberlist.DefaultLANConfig()
}

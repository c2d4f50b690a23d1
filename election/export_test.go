package election

import (
	"time"

	"github.com/hashicorp/raft"
)

// SetLogStoreWrapper puts w between Raft and its log store.
func (c *Config) SetLogStoreWrapper(w func(raft.LogStore) raft.LogStore) { c.wrapLogStore = w }

// SetSlowTimeouts gives the node a heartbeat timeout of d, so that a test
// can tell an election raft's timeouts started from one started sooner.
func (c *Config) SetSlowTimeouts(d time.Duration) {
	p, _ := profileNamed(ProfileFast)
	p.heartbeat, p.election, p.leaderLease = d, d, d
	c.timeouts = &p
}

// TurnOf and DialAfter expose the crash watch's pure parts.
var TurnOf = turnOf

func DialAfter(p string, turn int) time.Duration {
	pr, _ := profileNamed(p)
	return crashWatchTimingOf(pr).dialAfter(turn)
}

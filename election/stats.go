package election

import (
	"time"

	"github.com/hashicorp/raft"
)

// RaftStats are this node's Raft figures, as raft's accessors give them
// (not parsed back from raft.Stats' strings).
type RaftStats struct {
	Term         uint64
	LastLogIndex uint64
	CommitIndex  uint64
	AppliedIndex uint64
	// LastContact is when this node last heard from a leader; zero if
	// never. It means something only on a follower.
	LastContact time.Time
	// Leader is set while this node leads.
	Leader bool
}

// RaftStats returns this node's Raft figures; false on a worker, which
// runs no Raft.
func (n *Node) RaftStats() (RaftStats, bool) {
	if n.raft == nil {
		return RaftStats{}, false
	}
	return RaftStats{
		Term:         n.raft.CurrentTerm(),
		LastLogIndex: n.raft.LastIndex(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		LastContact:  n.raft.LastContact(),
		Leader:       n.raft.State() == raft.Leader,
	}, true
}

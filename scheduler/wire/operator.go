package wire

// Peer is one server of the Raft configuration, as GET
// /api/v1/operator/raft/peers shows it (`fencecron operator raft
// list-peers`).
type Peer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
	// Gossip is the server's state in this node's gossip view: alive,
	// suspect, dead, left, or "" if gossip does not know it.
	Gossip string `json:"gossip"`
}

// Peers answers GET /api/v1/operator/raft/peers: the Raft configuration
// as the answering node knows it.
type Peers struct {
	Node  string `json:"node"`
	Peers []Peer `json:"peers"`
}

// PeerRemoved answers DELETE /api/v1/operator/raft/peers/{id}.
type PeerRemoved struct {
	Removed string `json:"removed"`
}

// Restored answers PUT /api/v1/snapshot: what the restored snapshot held,
// and the epoch base the cluster counts epochs from now.
type Restored struct {
	LastIndex uint64 `json:"last_index"`
	Epoch     uint64 `json:"epoch"`
	EpochBase uint64 `json:"epoch_base"`
	Jobs      int    `json:"jobs"`
	Runs      int    `json:"runs"`
}

package election

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// A follower notices a dead leader only once it has heard nothing for a
// whole heartbeat timeout (more, since the other follower must notice
// too; see profileNamed). The timeout has to cover a leader that is slow:
// a GC pause, a loaded host, a congested link. But the commonest death of
// a leader is its process's (a panic, an OOM kill, a SIGKILL, a crash
// loop) on a host that stays up, and that one the host tells apart: a
// connection to a port no process listens on is refused at once. A slow
// leader still accepts.
//
// So a follower whose leader has been silent for a few heartbeat
// intervals (150 ms with the default profile; raft sends a heartbeat
// every tenth to fifth of its heartbeat timeout) dials the leader's Raft
// port. If the host refuses the connection, the follower does not wait
// out the timeout: it sends itself the message a leader sends when it
// hands leadership over (TimeoutNow). That starts an election the other
// voters take part in at once, though they have not timed their leader
// out yet (raft's leadership transfer). The election
// is raft's own, with its own votes and log checks: nothing about who may
// lead changes, only when the election starts. A host that is down, or
// cut off, refuses nothing, and the cluster waits out the timeout as
// before.
//
// What it costs when it is wrong: an election. A leader that is up but
// whose host refuses this follower (a firewall that rejects, rather than
// drops, while the leader's heartbeats do not reach it either) is
// deposed, where raft's pre-vote would have kept it; and a new leader
// whose first heartbeat arrives between the last check and the
// TimeoutNow is deposed too (raft's handler asks nothing). Either way the
// next leader is elected by raft's own rules, and every token is still
// minted in the log.
//
// Only one follower may start it: two candidates at once would split the
// vote, and the cluster would wait an election timeout for a retry. The
// followers take turns in the order of their IDs, each a few heartbeats
// after the one before, and a follower whose leader is back, or replaced,
// stops.

// crashWatchTiming is when a follower looks at its leader.
type crashWatchTiming struct {
	// every is how often it checks how long its leader has been silent:
	// raft's heartbeat interval (a tenth of the heartbeat timeout).
	every time.Duration
	// silent is how long the leader must have been silent before the
	// first follower in turn dials it: three heartbeat intervals. It is
	// also the least time between two dials of a leader that accepted.
	silent time.Duration
}

func crashWatchTimingOf(p profile) crashWatchTiming {
	every := p.heartbeat / 10
	return crashWatchTiming{every: every, silent: 3 * every}
}

// dialAfter is how long the leader must have been silent before the
// follower at position turn (0 first) in the order of IDs dials it: each
// turn waits two more silences than the one before, so the one before
// has dialled, and its election has had time to reach this follower.
func (t crashWatchTiming) dialAfter(turn int) time.Duration {
	return t.silent * time.Duration(1+2*turn)
}

// turnOf is where self stands, in the order of their IDs, among the
// voters of servers other than leader; false if self is not one of them.
func turnOf(servers []raft.Server, self, leader raft.ServerID) (int, bool) {
	var ids []raft.ServerID
	for _, s := range servers {
		if s.Suffrage == raft.Voter && s.ID != leader {
			ids = append(ids, s.ID)
		}
	}
	slices.Sort(ids)
	if i := slices.Index(ids, self); i >= 0 {
		return i, true
	}
	return 0, false
}

// watchCrashedLeader runs on a server for as long as the node is open.
func (n *Node) watchCrashedLeader() {
	defer n.wg.Done()
	timing := crashWatchTimingOf(n.profile)
	t := time.NewTicker(timing.every)
	defer t.Stop()
	var dialled time.Time
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		if n.raft.State() != raft.Follower {
			continue
		}
		addr, leader := n.raft.LeaderWithID()
		contact := n.raft.LastContact()
		if addr == "" || contact.IsZero() || time.Since(dialled) < timing.silent {
			continue
		}
		turn, ok := turnOf(n.raft.GetConfiguration().Configuration().Servers, raft.ServerID(n.cfg.NodeID), leader)
		if !ok || time.Since(contact) < timing.dialAfter(turn) {
			continue
		}
		dialled = time.Now()
		if !n.refusedBy(addr, timing.silent) {
			continue // alive, if slow: raft's own timeout decides
		}
		// Not if the leader spoke, or another took over, meanwhile: that
		// election would only depose a leader that is fine.
		if a, _ := n.raft.LeaderWithID(); a != addr || n.raft.State() != raft.Follower || !n.raft.LastContact().Equal(contact) {
			continue
		}
		n.log.Warn("the leader's Raft port refuses connections, so its process is gone: starting an election now rather than after the heartbeat timeout",
			"leader", string(leader), "addr", string(addr), "silent", time.Since(contact).Round(time.Millisecond))
		if err := n.startElection(); err != nil {
			n.log.Warn("could not start an election; raft will after its timeout", "err", err)
		}
	}
}

// refusedBy reports whether the host at addr refused a connection to it:
// nothing listens there. A dial that times out, or reaches something that
// is not the expected node, says nothing about the leader.
func (n *Node) refusedBy(addr raft.ServerAddress, timeout time.Duration) bool {
	c, err := n.stream.Dial(addr, timeout)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	c.Close()
	return false
}

// startElection makes this follower a candidate now, the way a leader
// handing over does: a TimeoutNow to itself, over its own authenticated
// transport (raft has no other way in). It dials the address it listens
// on, not the one it advertises: behind a NAT that does not loop back, a
// node cannot reach its own advertised address.
func (n *Node) startElection() error {
	id, addr := raft.ServerID(n.cfg.NodeID), n.transport.LocalAddr()
	req := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: n.transport.EncodePeer(id, addr),
	}}
	return n.transport.TimeoutNow(id, n.listenAddr(), req, &raft.TimeoutNowResponse{})
}

// listenAddr is an address this node's Raft listener can be dialled at
// from this host: its bound address, loopback if it listens on all.
func (n *Node) listenAddr() raft.ServerAddress {
	a, ok := n.stream.ln.Addr().(*net.TCPAddr)
	if !ok {
		return n.transport.LocalAddr()
	}
	ip := a.IP
	switch {
	case ip == nil || ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return raft.ServerAddress(net.JoinHostPort(ip.String(), strconv.Itoa(a.Port)))
}

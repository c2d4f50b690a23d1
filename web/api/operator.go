package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/fencecron/fencecron/jobs"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// Operator is what the operator endpoints act through (cmd/fencecron
// wires the node's Raft, its FSM and its store). Every method but Peers
// works on the leader only and returns election.ErrNotLeader elsewhere.
type Operator interface {
	// RemovePeer removes a server that is gone from the Raft
	// configuration (election.ErrPeerAlive if gossip sees it alive,
	// election.ErrNoSuchPeer if it is not there).
	RemovePeer(ctx context.Context, id string) error
	// SaveSnapshot writes a consistent snapshot of the replicated state
	// to w: everything committed before the call.
	SaveSnapshot(ctx context.Context, w io.Writer) error
	// RestoreSnapshot replaces the replicated state with a saved
	// snapshot; epochs and tokens go on growing from the greatest the
	// snapshot, the cluster and the store have seen.
	RestoreSnapshot(ctx context.Context, r io.Reader) (wire.Restored, error)
}

// maxSnapshotBytes bounds a snapshot sent for restore: what every server
// can take in (fsm.MaxSnapshotBytes).
const maxSnapshotBytes = replicated.MaxSnapshotBytes

// snapshotTimeout bounds saving and restoring a snapshot; it replaces the
// server's write timeout for these two requests.
const snapshotTimeout = 5 * time.Minute

// handlePeers lists the Raft configuration as this node knows it, with
// each server's gossip state. A worker has none.
func (s *Server) handlePeers(w http.ResponseWriter, r *http.Request) {
	voters, err := s.Cluster.Voters()
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if voters == nil && s.Cluster.State() == "Worker" {
		s.Error(w, r, fmt.Errorf("%w: %s is a worker and holds no Raft configuration: ask a server", wire.ErrBadRequest, s.Cluster.ID()))
		return
	}
	leader, _ := s.Cluster.Leader()
	gossip := map[string]string{}
	for _, m := range s.Cluster.Members() {
		gossip[m.Name] = m.State
	}
	out := wire.Peers{Node: s.Cluster.ID(), Peers: []wire.Peer{}}
	for _, v := range voters {
		out.Peers = append(out.Peers, wire.Peer{ID: v.ID, Address: v.Address, Voter: v.Voter, Leader: v.ID == leader, Gossip: gossip[v.ID]})
	}
	WriteJSON(w, http.StatusOK, out)
}

func (s *Server) handleRemovePeer(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if err := s.operator().RemovePeer(r.Context(), id); err != nil {
		s.Error(w, r, err)
		return
	}
	s.Logger.Warn("operator: removed a server from the raft configuration", "server", id, "client", r.RemoteAddr)
	WriteJSON(w, http.StatusOK, wire.PeerRemoved{Removed: id})
}

func (s *Server) handleSnapshotSave(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(snapshotTimeout))
	ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
	defer cancel()
	// The FSM's snapshot is in memory anyway: take it whole, so that a
	// failure is answered with its status rather than a cut body.
	var buf bytes.Buffer
	if err := s.operator().SaveSnapshot(ctx, &buf); err != nil {
		s.Error(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Header().Set("Content-Disposition", `attachment; filename="fencecron-snapshot.json"`)
	w.Write(buf.Bytes())
	s.Logger.Info("operator: snapshot saved", "client", r.RemoteAddr, "bytes", buf.Len())
}

func (s *Server) handleSnapshotRestore(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(snapshotTimeout))
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(snapshotTimeout))
	ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
	defer cancel()
	if !s.restoring.TryLock() {
		w.Header().Set("Retry-After", "10")
		s.Error(w, r, fmt.Errorf("%w: a restore is in progress on this node; try again once it has finished", wire.ErrTooMany))
		return
	}
	defer s.restoring.Unlock()
	body := http.MaxBytesReader(w, r.Body, maxSnapshotBytes)
	res, err := s.operator().RestoreSnapshot(ctx, body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			err = fmt.Errorf("%w: a snapshot is at most %d bytes", wire.ErrTooLarge, int64(maxSnapshotBytes))
		}
		s.Error(w, r, err)
		return
	}
	s.Logger.Warn("operator: restored the replicated state from a snapshot", "client", r.RemoteAddr, "last_index", res.LastIndex, "epoch_base", res.EpochBase)
	if who := aclAsker(r, s.Guard); who != "" {
		// The restored state's trail is the snapshot's: say who replaced it.
		detail := fmt.Sprintf("snapshot restored (up to index %d, epoch base %d) by %s", res.LastIndex, res.EpochBase, who)
		if err := s.Scheduler.Audit(ctx, jobs.EventRestored, s.Cluster.ID(), detail); err != nil {
			s.Logger.Warn("restore not written to the audit trail", "err", err)
		}
	}
	WriteJSON(w, http.StatusOK, res)
}

// operator is s.Operator, or one that refuses everything.
func (s *Server) operator() Operator {
	if s.Operator == nil {
		return noOperator{}
	}
	return s.Operator
}

type noOperator struct{}

var errNoOperator = fmt.Errorf("%w: this node has no operator endpoints", wire.ErrNoRoute)

func (noOperator) RemovePeer(context.Context, string) error      { return errNoOperator }
func (noOperator) SaveSnapshot(context.Context, io.Writer) error { return errNoOperator }
func (noOperator) RestoreSnapshot(context.Context, io.Reader) (wire.Restored, error) {
	return wire.Restored{}, errNoOperator
}

package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// operator carries out the operator endpoints (api.Operator) with this
// node's Raft, FSM and scheduler.
type operator struct {
	node  *election.Node
	fsm   *fsm.FSM
	sched *scheduler.Scheduler
	log   *slog.Logger
}

func (o *operator) RemovePeer(ctx context.Context, id string) error {
	return o.node.RemovePeer(ctx, id)
}

// SaveSnapshot writes the state after a barrier on the leader: everything
// committed before the request, at one applied index.
func (o *operator) SaveSnapshot(ctx context.Context, w io.Writer) error {
	if !o.node.IsLeader() {
		return election.ErrNotLeader
	}
	if err := o.node.Barrier(ctx); err != nil {
		return fmt.Errorf("snapshot: barrier: %w", err)
	}
	_, err := o.fsm.WriteSnapshot(w)
	return err
}

// RestoreSnapshot restores a saved snapshot, checked and given its epoch
// base by the scheduler (Scheduler.RestoreFloor, fsm.PrepareRestore),
// through this node's Raft.
func (o *operator) RestoreSnapshot(ctx context.Context, r io.Reader) (wire.Restored, error) {
	if !o.node.IsLeader() {
		return wire.Restored{}, election.ErrNotLeader
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return wire.Restored{}, err
	}
	floor, err := o.sched.RestoreFloor(ctx)
	if err != nil {
		return wire.Restored{}, err
	}
	prepared, info, err := replicated.PrepareRestore(data, floor)
	if err != nil {
		return wire.Restored{}, err
	}
	if err := o.node.Restore(ctx, replicated.RestoreMeta(prepared, info), bytes.NewReader(prepared)); err != nil {
		return wire.Restored{}, err
	}
	// The restored state names the snapshot's leader and epoch; this
	// node's scheduler sees the restore and starts a new epoch as a new
	// leader would (election entry at its term plus the base, recovery of
	// the snapshot's open attempts, catch-up on the schedule).
	return wire.Restored{LastIndex: info.LastIndex, Epoch: info.Epoch, EpochBase: info.EpochBase, Jobs: info.Jobs, Runs: info.Runs}, nil
}

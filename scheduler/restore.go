package scheduler

import (
	"context"
	"fmt"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// RestoreFloor is what this node knows beyond a snapshot it is asked to
// restore (PrepareRestore): the cluster's epoch raised to the greatest
// epoch of a token its store holds (epochs after the restore must stay
// above them; a store another node serves is asked through it), the fire
// times already granted, its job limits and its clock.
func (s *Scheduler) RestoreFloor(ctx context.Context) (replicated.RestoreFloor, error) {
	epoch, _ := s.FSM.Epoch()
	keys, err := s.Store.List(ctx, "")
	if err != nil {
		return replicated.RestoreFloor{}, fmt.Errorf("restore: read the store's greatest tokens (epochs must stay above them): %w", err)
	}
	for _, k := range keys {
		epoch = max(epoch, k.Greatest.Epoch)
	}
	return replicated.RestoreFloor{Epoch: epoch, Granted: s.FSM.GrantedThrough(), Limits: s.JobLimits(), Now: s.Clock.Now()}, nil
}

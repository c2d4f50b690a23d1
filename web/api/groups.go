package api

import (
	"net/http"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// GroupState is the part of the replicated state about concurrency
// groups (fsm.FSM implements it). A State that does not implement
// it has no groups to show.
type GroupState interface {
	Groups() []fsm.GroupStatus
}

// GroupView is one concurrency group as the API and the dashboard show
// it: its limits, the runs holding a place, and the waiters in order,
// each with its reason and how long it has waited.
type GroupView struct {
	jobs.Group
	Defined bool         `json:"defined"`
	Running []jobs.Run   `json:"running"`
	Waiting []WaiterView `json:"waiting"`
	// OldestWaitSeconds is how long the oldest waiter has waited.
	OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
}

type WaiterView struct {
	Run         string    `json:"run"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Since       time.Time `json:"since"`
	WaitSeconds float64   `json:"wait_seconds"`
	Reason      string    `json:"reason"`
}

// groups returns the groups of the replicated state as views, as of now.
func (s *Server) Groups() []GroupView {
	gs, ok := s.State.(GroupState)
	if !ok {
		return nil
	}
	now := s.Clock.Now()
	var out []GroupView
	for _, g := range gs.Groups() {
		v := GroupView{Group: g.Group, Defined: g.Defined, Running: nonNil(g.Holding), Waiting: []WaiterView{}}
		for _, w := range g.Waiting {
			v.Waiting = append(v.Waiting, WaiterView{Run: w.Run, ScheduledAt: w.ScheduledAt, Since: w.Since,
				WaitSeconds: max(0, now.Sub(w.Since).Seconds()), Reason: jobs.WaitingReason(g.Name)})
		}
		if len(v.Waiting) > 0 {
			v.OldestWaitSeconds = v.Waiting[0].WaitSeconds
			for _, w := range v.Waiting[1:] {
				v.OldestWaitSeconds = max(v.OldestWaitSeconds, w.WaitSeconds)
			}
		}
		out = append(out, v)
	}
	return out
}

// handleGroups answers GET /api/v1/groups: every concurrency group with
// its running runs and its queue.
func (s *Server) handleGroups(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, map[string]any{"groups": nonNil(s.GroupsFor(r))})
}

// GroupsFor returns the groups the request's caller may read: those of
// the namespaces it may read (all, with ACLs off).
func (s *Server) GroupsFor(r *http.Request) []GroupView {
	all := s.Groups()
	allow := readable(r)
	if allow == nil {
		return all
	}
	out := all[:0:0]
	for _, g := range all {
		ns := g.Namespace
		if ns == "" {
			ns = fencedstore.JobNamespace(g.Name)
		}
		if allow(ns) {
			out = append(out, g)
		}
	}
	return out
}

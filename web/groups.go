package web

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// GroupState is the part of the replicated state about concurrency
// groups (scheduler.FSM implements it). A State that does not implement
// it has no groups to show.
type GroupState interface {
	Groups() []fsm.GroupStatus
}

// groupView is one concurrency group as the API and the dashboard show
// it: its limits, the runs holding a place, and the waiters in order,
// each with its reason and how long it has waited.
type groupView struct {
	jobs.Group
	Defined bool         `json:"defined"`
	Running []jobs.Run   `json:"running"`
	Waiting []waiterView `json:"waiting"`
	// OldestWaitSeconds is how long the oldest waiter has waited.
	OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
}

type waiterView struct {
	Run         string    `json:"run"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Since       time.Time `json:"since"`
	WaitSeconds float64   `json:"wait_seconds"`
	Reason      string    `json:"reason"`
}

// groups returns the groups of the replicated state as views, as of now.
func (s *Server) groups() []groupView {
	gs, ok := s.State.(GroupState)
	if !ok {
		return nil
	}
	now := s.Clock.Now()
	var out []groupView
	for _, g := range gs.Groups() {
		v := groupView{Group: g.Group, Defined: g.Defined, Running: nonNil(g.Holding), Waiting: []waiterView{}}
		for _, w := range g.Waiting {
			v.Waiting = append(v.Waiting, waiterView{Run: w.Run, ScheduledAt: w.ScheduledAt, Since: w.Since,
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
	writeJSON(w, http.StatusOK, map[string]any{"groups": nonNil(s.groups())})
}

var (
	groupRunningDesc = prometheus.NewDesc("fencecron_group_running", "Runs of the concurrency group's jobs holding a place (granted and not finished, retries included).", []string{"group"}, nil)
	groupWaitingDesc = prometheus.NewDesc("fencecron_group_waiting", "Runs waiting for a place in the concurrency group (queue depth).", []string{"group"}, nil)
	groupOldestDesc  = prometheus.NewDesc("fencecron_group_oldest_waiter_age_seconds", "How long the concurrency group's oldest waiter has waited; 0 with none.", []string{"group"}, nil)
)

// groupCollector reads the concurrency groups of the replicated state at
// scrape time: the same on every server (aggregate with max()).
type groupCollector struct{ s *Server }

func (c groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- groupRunningDesc
	ch <- groupWaitingDesc
	ch <- groupOldestDesc
}

func (c groupCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.s.groups() {
		ch <- prometheus.MustNewConstMetric(groupRunningDesc, prometheus.GaugeValue, float64(len(g.Running)), g.Name)
		ch <- prometheus.MustNewConstMetric(groupWaitingDesc, prometheus.GaugeValue, float64(len(g.Waiting)), g.Name)
		ch <- prometheus.MustNewConstMetric(groupOldestDesc, prometheus.GaugeValue, g.OldestWaitSeconds, g.Name)
	}
}

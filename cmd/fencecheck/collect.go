package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// getJSON reads path from a node within timeout: a stopped node must not
// hold the collector up.
func getJSON(n *localcluster.Node, path string, timeout time.Duration, v any) error {
	return n.GetJSONWithin(path, timeout, v)
}

func getStatus(n *localcluster.Node, timeout time.Duration) (wire.Status, error) {
	var st wire.Status
	err := getJSON(n, "/api/v1/status", timeout, &st)
	return st, err
}

func getRuns(n *localcluster.Node, limit int, timeout time.Duration) ([]jobs.Run, error) {
	var out wire.RunList
	err := getJSON(n, fmt.Sprintf("/api/v1/runs?limit=%d", limit), timeout, &out)
	return out.Runs, err
}

// collect reads the cluster every Poll until ctx ends: the cluster keeps
// only its newest runs, events and skips, so they are read as they come.
func (h *Harness) collect(ctx context.Context) {
	tick := time.NewTicker(h.cfg.Poll)
	defer tick.Stop()
	for i := 0; ; i++ {
		limit := 300
		if i%30 == 0 {
			limit = 10000
		}
		h.pollOnce(limit)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pollOnce samples every server's epoch and the store's keys, and reads
// runs, events and skips from one server that answers (the leader first).
func (h *Harness) pollOnce(limit int) {
	servers := h.c.Servers()
	type answer struct {
		n  *localcluster.Node
		st wire.Status
	}
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for _, n := range servers {
		if !n.Running() || n.Stopped() {
			continue
		}
		life := h.life(n.Name)
		wg.Go(func() {
			st, err := getStatus(n, time.Second)
			if err != nil || h.life(n.Name) != life {
				return // failed, or restarted meanwhile: whose answer was it?
			}
			mu.Lock()
			defer mu.Unlock()
			answers = append(answers, answer{n, st})
			h.obs.EpochSamples = append(h.obs.EpochSamples, EpochSample{At: time.Now(), Node: n.Name, Life: life, Epoch: st.Epoch})
		})
	}
	wg.Go(func() {
		if n := h.c.Node("store"); !n.Running() || n.Stopped() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		keys, err := h.reader.List(ctx, "")
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		h.obs.AddStoreListing(time.Now(), keys)
	})
	wg.Wait()
	// The leader with the greatest epoch has the newest state.
	var from *localcluster.Node
	var best uint64
	for _, a := range answers {
		if a.st.RaftState == "Leader" && a.st.Epoch >= best {
			from, best = a.n, a.st.Epoch
		}
	}
	if from == nil && len(answers) > 0 {
		from = answers[0].n
	}
	if from == nil {
		return
	}
	h.setLeader(from.Name)
	h.readState(from, limit, 2*time.Second)
}

// readState merges one node's runs, events and skips into the
// observation.
func (h *Harness) readState(n *localcluster.Node, limit int, timeout time.Duration) error {
	now := time.Now()
	runs, err := getRuns(n, limit, timeout)
	if err != nil {
		return err
	}
	h.obs.AddRuns(n.Name, now, runs)
	for {
		var after uint64
		if k := len(h.obs.Events); k > 0 {
			after = h.obs.Events[k-1].Seq
		}
		var page wire.EventList
		if err := getJSON(n, fmt.Sprintf("/api/v1/events?after=%d&limit=5000", after), timeout, &page); err != nil {
			return err
		}
		h.obs.AddEvents(page.Events)
		if len(page.Counters) > 0 {
			h.obs.Counters = page.Counters
		}
		if len(page.Events) < 5000 {
			break
		}
	}
	var skips struct{ Skips []jobs.SkipRange }
	if err := getJSON(n, "/api/v1/skips", timeout, &skips); err != nil {
		return err
	}
	h.obs.AddSkips(skips.Skips)
	return nil
}

// drain waits until every server agrees on a leader, the leader has
// handled every fire time of the window, and every run in the window has
// finished, or Drain passes.
func (h *Harness) drain(ctx context.Context) error {
	return until(ctx, h.cfg.Drain, func() error {
		a, err := localcluster.Agreed(h.c.Servers())
		if err != nil {
			return err
		}
		leader := h.c.Node(a.Leader)
		runs, err := getRuns(leader, 10000, 5*time.Second)
		if err != nil {
			return err
		}
		last := map[string]time.Time{}
		for _, r := range runs {
			if r.ScheduledAt.After(last[r.Job]) {
				last[r.Job] = r.ScheduledAt
			}
			if !r.ScheduledAt.After(h.obs.Window.To) && !r.State.Terminal() {
				return fmt.Errorf("run %s is still %s", r.ID, r.State)
			}
		}
		var skips struct{ Skips []jobs.SkipRange }
		if err := getJSON(leader, "/api/v1/skips", 5*time.Second, &skips); err != nil {
			return err
		}
		for _, s := range skips.Skips {
			if s.To.After(last[s.Job]) {
				last[s.Job] = s.To
			}
		}
		for _, spec := range h.obs.Jobs {
			if !last[spec.Name].After(h.obs.Window.To) {
				return fmt.Errorf("job %s: nothing scheduled after the window yet (last %s)", spec.Name, last[spec.Name].Format(timeFmt))
			}
		}
		return nil
	})
}

// finalRead reads everything once more from the leader, and the whole
// store from the store node.
func (h *Harness) finalRead(ctx context.Context) error {
	var leader *localcluster.Node
	if err := until(ctx, 30*time.Second, func() error {
		a, err := localcluster.Agreed(h.c.Servers())
		if err == nil {
			leader = h.c.Node(a.Leader)
		}
		return err
	}); err != nil {
		return err
	}
	if err := h.readState(leader, 10000, 10*time.Second); err != nil {
		return err
	}
	// Every server's runs, so divergent replicas show up as sightings.
	for _, n := range h.c.Servers() {
		if runs, err := getRuns(n, 10000, 10*time.Second); err == nil {
			h.obs.AddRuns(n.Name, time.Now(), runs)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return readStore(rctx, h.reader, h.obs)
}

package pages

import (
	"fmt"
	"github.com/fencecron/fencecron/web/api"
	"strings"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// Dependencies on the timeline: a job's runs that followed others
// (jobs.Run.After) are drawn with the parents' runs they followed, up the
// chain, and a link from each parent's last attempt to the run's first.

// Bounds on the runs a chain adds to a timeline.
const (
	maxChainDepth = 8
	maxChainRuns  = 32
)

// svgLink is a curve from a parent's attempt to the attempt that
// followed it.
type svgLink struct {
	X1, Y1, X2, Y2 float64
	Title          string
}

// ancestors returns the runs that runs followed, and theirs, up to the
// bounds, none of runs itself.
func (s *Dashboard) ancestors(st api.State, runs []jobs.Run) []jobs.Run {
	have := map[string]bool{}
	for _, r := range runs {
		have[r.ID] = true
	}
	var out []jobs.Run
	level := runs
	for depth := 0; depth < maxChainDepth && len(level) > 0 && len(out) < maxChainRuns; depth++ {
		var next []jobs.Run
		for _, r := range level {
			for _, id := range r.After {
				if have[id] || len(out) >= maxChainRuns {
					continue
				}
				have[id] = true
				job, _, ok := strings.Cut(id, "@")
				if !ok {
					continue
				}
				for _, p := range st.Runs(fsm.RunFilter{Job: job, Limit: 50}) {
					if p.ID == id {
						out = append(out, p)
						next = append(next, p)
						break
					}
				}
			}
		}
		level = next
	}
	return out
}

// chainLinks links each run's first attempt to the last attempt of each
// parent run it followed, where both are drawn.
func chainLinks(runs []jobs.Run, bars []svgBar) []svgLink {
	barOf := map[string]svgBar{}
	for _, b := range bars {
		barOf[b.Attempt] = b
	}
	byID := map[string]jobs.Run{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	var out []svgLink
	for _, r := range runs {
		if len(r.After) == 0 || len(r.Attempts) == 0 {
			continue
		}
		child, ok := barOf[r.Attempts[0].ID]
		if !ok {
			continue
		}
		for _, id := range r.After {
			p, ok := byID[id]
			if !ok || len(p.Attempts) == 0 {
				continue
			}
			parent, ok := barOf[p.Attempts[len(p.Attempts)-1].ID]
			if !ok {
				continue
			}
			out = append(out, svgLink{X1: parent.X + parent.W, Y1: parent.Y + tlBarH/2, X2: child.WaitX, Y2: child.Y + tlBarH/2,
				Title: fmt.Sprintf("%s followed %s (after:)", r.ID, p.ID)})
		}
	}
	return out
}

package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/explain"
	"github.com/fencecron/fencecron/scheduler/history"
)

// handleExplain answers GET /api/v1/jobs/{name}/explain?at=TIME: what
// became of the job's fire time at TIME (an RFC 3339 instant, or a wall
// time such as 2026-03-29T02:30 read in the job's zone), from the
// replicated state and this node's history.
func (s *Server) handleExplain(w http.ResponseWriter, r *http.Request) {
	name, err := JobName(r, chi.URLParam(r, "name"))
	if err != nil {
		s.Error(w, r, err)
		return
	}
	ex, err := s.explain(name, r.URL.Query().Get("at"))
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, ex)
}

func (s *Server) explain(name, at string) (explain.Explanation, error) {
	spec, ok := s.State.Spec(name)
	if !ok {
		return explain.Explanation{}, fmt.Errorf("job %q: %w", name, jobs.ErrUnknownJob)
	}
	if at == "" {
		return explain.Explanation{}, BadRequest("at is required: %v", explain.ErrBadTime)
	}
	ex, err := explain.Explain(explain.ExplainInput{
		Spec:  spec,
		Asked: at,
		Now:   s.Clock.Now(),
		Skips: s.State.Skips(name),
		Run: func(t time.Time) (*jobs.Run, error) {
			page, err := s.ListRuns(history.RunQuery{Job: name, Since: t, Until: t.Add(time.Nanosecond), Limit: 1})
			if err != nil || len(page.Runs) == 0 {
				return nil, err
			}
			return &page.Runs[0], nil
		},
		PausedAt: func(t time.Time) (paused, known bool, err error) {
			var last jobs.Event
			for _, kind := range []string{jobs.EventPaused, jobs.EventResumed} {
				page, err := s.history().ListEvents(s.State.Events(0, 0), history.EventQuery{Job: name, Kind: kind, Until: t, Limit: 1})
				if err != nil {
					return false, false, err
				}
				if n := len(page.Events); n > 0 && page.Events[n-1].Seq > last.Seq {
					last = page.Events[n-1]
				}
			}
			return last.Kind == jobs.EventPaused, last.Seq > 0, nil
		},
	})
	if errors.Is(err, explain.ErrBadTime) {
		return ex, BadRequest("%v", err)
	}
	return ex, err
}

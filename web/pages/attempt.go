package pages

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

type attemptPage struct {
	pageBase
	Run     jobs.Run
	Attempt jobs.Attempt
	Output  worker.LiveOutput
	// OutputErr says why the live output could not be read.
	OutputErr string
	// Published is set when the attempt's stdout went to the store.
	Published bool
}

func (s *Dashboard) handleAttemptPage(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	run, a, err := s.API.FindAttempt(id)
	if err != nil {
		s.API.Error(w, r, err)
		return
	}
	p := &attemptPage{pageBase: s.base(r, "Attempt "+id, "jobs"), Run: run, Attempt: a,
		Published: run.Output != "" && a.StoreOutcome == "applied"}
	p.Output, err = s.API.AttemptOutput(r.Context(), a, worker.OutputRequest{Attempt: id})
	if err != nil {
		p.OutputErr = err.Error()
		p.Output = worker.RecordedOutput(a)
	}
	s.render(w, r, http.StatusOK, "attempt.html", p)
}

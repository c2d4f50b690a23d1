package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// An attempt's output (scheduler/output.go): the dashboard's GET /attempts/{id} shows it,
// GET /api/v1/attempts/{id}/output?stdout_from=&stderr_from= returns it
// as JSON. While the attempt runs, this node asks its worker (Outputs,
// over the internal API when the worker is another node) and the page's
// script asks again every second from where it left off; once it has
// ended, the attempt's record has its tails, here or in the history.

// Outputs asks a worker for what an attempt running there wrote
// (scheduler/rpc.Client). An attempt the worker no longer runs is an
// error wrapping jobs.ErrNotFound.
type Outputs interface {
	AttemptOutput(ctx context.Context, worker string, req worker.OutputRequest) (worker.LiveOutput, error)
}

// outputAskTimeout bounds the question to a worker while a page renders.
const outputAskTimeout = 3 * time.Second

// findAttempt returns the run and attempt of an attempt id: from the
// replicated state, else from the history.
func (s *Server) FindAttempt(id string) (jobs.Run, jobs.Attempt, error) {
	runID, n, ok := jobs.SplitAttemptID(id)
	notFound := fmt.Errorf("attempt %q: %w", id, jobs.ErrNotFound)
	if !ok {
		return jobs.Run{}, jobs.Attempt{}, notFound
	}
	var run jobs.Run
	found := false
	if st, ok := s.State.(interface{ Run(string) (jobs.Run, bool) }); ok {
		run, found = st.Run(runID)
	}
	if !found {
		job, at, ok := splitRunID(runID)
		if !ok {
			return jobs.Run{}, jobs.Attempt{}, notFound
		}
		page, err := s.ListRuns(history.RunQuery{Job: job, Since: at, Until: at.Add(time.Millisecond), Limit: 4})
		if err != nil {
			return jobs.Run{}, jobs.Attempt{}, err
		}
		for _, r := range page.Runs {
			if r.ID == runID {
				run, found = r, true
			}
		}
	}
	if !found || n > len(run.Attempts) {
		return jobs.Run{}, jobs.Attempt{}, notFound
	}
	return run, run.Attempts[n-1], nil
}

// splitRunID reads jobs.RunID's "job@20060102T150405[.000]Z".
func splitRunID(id string) (string, time.Time, bool) {
	i := strings.LastIndexByte(id, '@')
	if i <= 0 {
		return "", time.Time{}, false
	}
	for _, layout := range []string{"20060102T150405Z", "20060102T150405.000Z"} {
		if t, err := time.Parse(layout, id[i+1:]); err == nil {
			return id[:i], t, true
		}
	}
	return "", time.Time{}, false
}

// attemptOutput returns what attempt a wrote from the asked offsets on:
// its worker's live rings while it runs, its record's tails once it has
// ended (or its worker no longer has it).
func (s *Server) AttemptOutput(ctx context.Context, a jobs.Attempt, req worker.OutputRequest) (worker.LiveOutput, error) {
	if !a.State.Terminal() && s.Outputs != nil {
		ctx, cancel := context.WithTimeout(ctx, outputAskTimeout)
		defer cancel()
		out, err := s.Outputs.AttemptOutput(ctx, a.Worker, req)
		switch {
		case err == nil:
			return out, nil
		case !errors.Is(err, jobs.ErrNotFound):
			return worker.LiveOutput{}, fmt.Errorf("%w: output of attempt %s from its worker %s: %v", errUnavailable, a.ID, a.Worker, err)
		}
		// Not on its worker any more: its completion is on its way.
	}
	out := worker.RecordedOutput(a)
	out.Final = a.State.Terminal()
	return out, nil
}

func (s *Server) handleAttemptOutput(w http.ResponseWriter, r *http.Request) {
	req := worker.OutputRequest{Attempt: chi.URLParam(r, "id")}
	for name, v := range map[string]*int64{"stdout_from": &req.StdoutFrom, "stderr_from": &req.StderrFrom} {
		if t := r.URL.Query().Get(name); t != "" {
			n, err := strconv.ParseInt(t, 10, 64)
			if err != nil || n < 0 {
				s.Error(w, r, BadRequest("%s must be a byte offset (0 or more), got %q", name, t))
				return
			}
			*v = n
		}
	}
	_, a, err := s.FindAttempt(req.Attempt)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	out, err := s.AttemptOutput(r.Context(), a, req)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, out)
}

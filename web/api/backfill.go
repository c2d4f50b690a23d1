package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// maxBackfillBody bounds the request.
const maxBackfillBody = 4 << 10

// handleBackfill queues runs of a job for the fire times of its schedule
// in [from, to) that have none (scheduler.Backfill), or with dry_run
// lists them; it answers what was (or would be) created and which times
// already had a run.
func (s *Server) handleBackfill(w http.ResponseWriter, r *http.Request) {
	name, err := JobName(r, chi.URLParam(r, "name"))
	if err != nil {
		s.Error(w, r, err)
		return
	}
	var body wire.BackfillBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBackfillBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		s.Error(w, r, BadRequest("decode backfill request (want {\"from\", \"to\", \"dry_run\", \"max_running\"}): %v", err))
		return
	}
	spec, ok := s.State.Spec(name)
	if !ok {
		s.Error(w, r, fmt.Errorf("backfill %s: %w", name, jobs.ErrUnknownJob))
		return
	}
	loc, err := spec.Location()
	if err != nil {
		loc = time.UTC
	}
	from, err := ParseBackfillTime(body.From, loc)
	if err != nil {
		s.Error(w, r, BadRequest("from: %v", err))
		return
	}
	to, err := ParseBackfillTime(body.To, loc)
	if err != nil {
		s.Error(w, r, BadRequest("to: %v", err))
		return
	}
	res, err := s.Scheduler.Backfill(r.Context(), fsm.BackfillRequest{Job: name, From: from, To: to, DryRun: body.DryRun, MaxRunning: body.MaxRunning,
		Asker: aclAsker(r, s.Guard)})
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, res)
}

// ParseBackfillTime reads an RFC 3339 time, or a date or wall-clock time
// without an offset in loc.
func ParseBackfillTime(v string, loc *time.Location) (time.Time, error) {
	if v == "" {
		return time.Time{}, fmt.Errorf("required: an RFC 3339 time such as 2026-07-01T00:00:00Z, or a date such as 2026-07-01 (in the job's time zone)")
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, v, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time such as 2026-07-01T00:00:00Z, or a date such as 2026-07-01 (in the job's time zone)", v)
}

package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/web/auth"
)

// maxReleaseBody bounds a release request's body: a reason and nothing
// else.
const maxReleaseBody = 8 << 10

// releaseRequest is the body of POST /api/v1/attempts/{id}/release (JSON;
// a dashboard form sends the field "reason" instead).
type releaseRequest struct {
	Reason string `json:"reason"`
}

// handleRelease ends an attempt's lease through the log; the audit trail
// names the reason and who asked (auth.Guard.Asker).
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	if auth.IsForm(r) {
		r.Body = http.MaxBytesReader(w, r.Body, maxReleaseBody)
		req.Reason = r.PostFormValue("reason")
	} else if r.ContentLength != 0 {
		dec := json.NewDecoder(io.LimitReader(r.Body, maxReleaseBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			s.Error(w, r, BadRequest("release: the body must be {\"reason\": TEXT} of at most %d bytes: %v", maxReleaseBody, err))
			return
		}
	}
	if strings.TrimSpace(req.Reason) == "" {
		s.Error(w, r, BadRequest("release: a reason is required ({\"reason\": TEXT}): it goes into the audit trail"))
		return
	}
	rel, err := s.Scheduler.Release(r.Context(), chi.URLParam(r, "id"), req.Reason, s.Guard.Asker(r))
	if err != nil {
		s.Error(w, r, err)
		return
	}
	s.answer(w, r, rel)
}

package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

// Releaser ends an attempt's lease now, on an operator's word
// (scheduler.Scheduler implements it; see scheduler.Releaser for its
// errors). A Server whose Scheduler does not implement it answers
// release requests 503.
type Releaser interface {
	Release(ctx context.Context, attempt, reason, asker string) (scheduler.Released, error)
}

// maxReleaseBody bounds a release request's body: a reason and nothing
// else.
const maxReleaseBody = 8 << 10

// releaseRequest is the body of POST /api/v1/attempts/{id}/release (JSON;
// a dashboard form sends the field "reason" instead).
type releaseRequest struct {
	Reason string `json:"reason"`
}

// handleRelease ends an attempt's lease through the log; the audit trail
// names the reason and who asked (asker).
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	rl, ok := s.Scheduler.(Releaser)
	if !ok {
		s.error(w, r, fmt.Errorf("release: this node cannot release attempts: %w", jobs.ErrNotLeader))
		return
	}
	var req releaseRequest
	if isForm(r) {
		r.Body = http.MaxBytesReader(w, r.Body, maxReleaseBody)
		req.Reason = r.PostFormValue("reason")
	} else if r.ContentLength != 0 {
		dec := json.NewDecoder(io.LimitReader(r.Body, maxReleaseBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			s.error(w, r, badRequest("release: the body must be {\"reason\": TEXT} of at most %d bytes: %v", maxReleaseBody, err))
			return
		}
	}
	if strings.TrimSpace(req.Reason) == "" {
		s.error(w, r, badRequest("release: a reason is required ({\"reason\": TEXT}): it goes into the audit trail"))
		return
	}
	rel, err := rl.Release(r.Context(), chi.URLParam(r, "id"), req.Reason, s.asker(r))
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.answer(w, r, rel)
}

// asker names who made a change, for the audit trail: requireWrite has
// let r through already. api.token is one shared token without a name of
// its own, so the name says how the caller proved it holds it and from
// which address: "api.token (bearer) from 10.0.0.7", "api.token
// (dashboard login) from ...", or, on a node without api.token,
// "loopback 127.0.0.1".
func (s *Server) asker(r *http.Request) string {
	client := clientKey(r)
	switch {
	case s.APIToken == "":
		return "loopback " + client
	case r.Header.Get("Authorization") != "":
		return "api.token (bearer) from " + client
	default:
		return "api.token (dashboard login) from " + client
	}
}

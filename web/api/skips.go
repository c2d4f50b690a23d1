package api

import (
	"net/http"

	"github.com/fencecron/fencecron/scheduler/wire"
)

// handleSkips lists the fire times the leader deliberately did not run,
// as ranges with a reason (misfire and catch-up policies).
func (s *Server) handleSkips(w http.ResponseWriter, r *http.Request) {
	job, err := JobName(r, r.URL.Query().Get("job"))
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, wire.SkipList{Skips: nonNil(s.StateFor(r).Skips(job))})
}

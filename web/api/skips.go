package api

import (
	"net/http"

	"github.com/fencecron/fencecron/scheduler/wire"
)

// handleSkips lists the fire times the leader deliberately did not run,
// as ranges with a reason (misfire and catch-up policies).
func (s *Server) handleSkips(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, wire.SkipList{Skips: nonNil(s.State.Skips(r.URL.Query().Get("job")))})
}

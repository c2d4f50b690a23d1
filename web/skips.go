package web

import "net/http"

// handleSkips returns the recorded skip ranges (?job= for one job): fire
// times the scheduler deliberately did not run, with the reason. Together
// with the runs they account for every scheduled time.
func (s *Server) handleSkips(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"skips": nonNil(s.State.Skips(r.URL.Query().Get("job")))})
}

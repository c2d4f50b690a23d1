package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/web/wire"
)

func (s *Server) status() wire.Status {
	epoch, epochOf := s.State.Epoch()
	id, addr := s.Cluster.Leader()
	set := s.State.JobSetInfo()
	drifted := func(hash string) bool { return hash != "" && set.Hash != "" && hash != set.Hash }
	st := wire.Status{
		Node: s.Cluster.ID(), RaftState: s.Cluster.State(),
		Leader: id, LeaderAddr: addr, Epoch: epoch, EpochOf: epochOf,
		Jobs: set, ConfigHash: s.Cluster.Meta().ConfigHash,
		Members: []wire.MemberStatus{}, Voters: []election.Voter{},
	}
	st.Drifted = drifted(st.ConfigHash)
	for _, m := range s.Cluster.Members() {
		st.Members = append(st.Members, wire.MemberStatus{Member: m, Drifted: drifted(m.Meta.ConfigHash)})
	}
	if vs, err := s.Cluster.Voters(); err == nil && vs != nil {
		st.Voters = vs
	}
	return st
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.status())
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	st := s.status()
	if h, ok := s.State.(interface{ Halted() error }); ok && h.Halted() != nil {
		http.Error(w, "not ready: "+h.Halted().Error()+"\n", http.StatusServiceUnavailable)
		return
	}
	if st.Leader == "" || st.Epoch == 0 {
		http.Error(w, "not ready: no leader with a committed epoch yet\n", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "ready: leader %s, epoch %d\n", st.Leader, st.Epoch)
}

func (s *Server) jobs() []wire.Job {
	specs, _, _, _ := s.State.JobSet()
	now := s.Clock.Now()
	out := make([]wire.Job, 0, len(specs))
	for _, spec := range specs {
		j := wire.Job{Spec: spec}
		if sched, err := spec.Schedule(); err == nil {
			j.NextFire = sched.Next(now)
		}
		if run, ok := s.State.LastRun(spec.Name); ok {
			j.LastRun = &run
		}
		out = append(out, j)
	}
	return out
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.JobList{Jobs: s.jobs()})
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	for _, j := range s.jobs() {
		if j.Name == name {
			writeJSON(w, http.StatusOK, j)
			return
		}
	}
	s.error(w, r, fmt.Errorf("job %q: %w", name, jobs.ErrNotFound))
}

// handleRuns lists runs, newest scheduled first, from the replicated
// state and this server's history (see history.go for the parameters).
func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	q, err := s.runQuery(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	page, err := s.listRuns(q)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.RunList{Runs: nonNil(page.Runs), Next: page.Next})
}

func (s *Server) handleJobSet(w http.ResponseWriter, r *http.Request) {
	specs, _, _, _ := s.State.JobSet()
	writeJSON(w, http.StatusOK, wire.JobSet{Info: s.State.JobSetInfo(), Jobs: nonNil(specs)})
}

// maxJobSetBody bounds PUT /api/v1/jobset: as large as a config file may
// be (config.MaxFileSize), and well below what a follower may forward to
// the leader (scheduler/rpc takes 8 MiB).
const maxJobSetBody = 4 << 20

func (s *Server) handleApplyJobSet(w http.ResponseWriter, r *http.Request) {
	var req wire.JobSetRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJobSetBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.error(w, r, fmt.Errorf("%w: a job set is at most %d bytes", errTooLarge, maxJobSetBody))
			return
		}
		s.error(w, r, badRequest("decode job set: %v", err))
		return
	}
	if req.Source == "" {
		req.Source = "PUT /api/v1/jobset from " + r.RemoteAddr
	}
	hash, err := s.Scheduler.SetJobs(r.Context(), req.Jobs, req.Source)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.JobSetApplied{Hash: hash, Source: req.Source, Jobs: len(req.Jobs)})
}

// handleTrigger starts a run now; ?force=true overrides the job's overlap
// policy, which the leader records in the audit trail.
func (s *Server) handleTrigger(w http.ResponseWriter, r *http.Request) {
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		f, err := strconv.ParseBool(v)
		if err != nil {
			s.error(w, r, badRequest("force must be true or false, got %q", v))
			return
		}
		force = f
	}
	run, err := s.Scheduler.Trigger(r.Context(), chi.URLParam(r, "name"), force)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.answer(w, r, run)
}

func (s *Server) handlePause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		if err := s.Scheduler.Pause(r.Context(), name, paused); err != nil {
			s.error(w, r, err)
			return
		}
		s.answer(w, r, wire.Paused{Job: name, Paused: paused})
	}
}

// handleEventsJSON returns the audit trail as JSON (see history.go for
// the parameters); with Accept: text/event-stream it streams instead (see
// events.go).
func (s *Server) handleEventsJSON(w http.ResponseWriter, r *http.Request) {
	q, err := s.eventQuery(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	page, err := s.history().ListEvents(s.State.Events(0, 0), q)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.EventList{Events: nonNil(page.Events), Counters: s.State.Counters(), Next: page.Next})
}

// Errors of the request itself: web/wire's, under the names web's files
// use.
var (
	errBadRequest   = wire.ErrBadRequest
	errUnauthorized = wire.ErrUnauthorized
	errForbidden    = wire.ErrForbidden
	errMethod       = wire.ErrMethod
	errUnavailable  = wire.ErrUnavailable
	errMisdirected  = wire.ErrMisdirected
	errTooLarge     = wire.ErrTooLarge
	errTooMany      = wire.ErrTooMany
	errNoRoute      = wire.ErrNoRoute
)

// internalPrefix is where the calls between nodes go (scheduler/rpc's
// Prefix): Server.Internal serves them.
const internalPrefix = "/internal/v1"

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// statusOf is the HTTP status of err, from the one table in web/wire.
func statusOf(err error) int {
	status, _ := wire.StatusOf(err)
	return status
}

func (s *Server) error(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	switch {
	case code == http.StatusServiceUnavailable:
		// Not the leader, or no leader yet: the caller looks again.
		s.Logger.Debug("request refused for now", "method", r.Method, "path", r.URL.Path, "err", err)
	case code >= 500:
		s.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fencecron"`)
	}
	var re *retryError
	if errors.As(err, &re) {
		w.Header().Set("Retry-After", retryAfter(re.after))
	}
	if wantsHTML(r) {
		s.renderError(w, r, code, err)
		return
	}
	writeJSON(w, code, wire.Body(err))
}

// wantsHTML reports whether an error should be a page: a dashboard page,
// or a dashboard form posted without script.
func wantsHTML(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, "/api/") || strings.HasPrefix(r.URL.Path, "/internal/") || r.URL.Path == "/metrics" {
		return isForm(r) && strings.Contains(r.Header.Get("Accept"), "text/html")
	}
	return true
}

// answer writes v as JSON, or, for a dashboard form posted without
// script, sends the browser back to the page it came from.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, v any) {
	if isForm(r) && strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, localPath(r.PostFormValue("back")), http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

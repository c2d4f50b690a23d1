package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/auth"
)

func (s *Server) Status() wire.Status {
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
	if r, ok := s.Cluster.(interface{ NoLeaderReason() string }); ok && id == "" {
		st.NoLeader = r.NoLeaderReason()
	}
	st.Drifted = drifted(st.ConfigHash)
	st.Notify = s.NotifyStatus()
	if o := s.State.Overload(); o.Active(s.Clock.Now()) {
		st.Overload = &wire.OverloadStatus{Since: o.Since, Last: o.Last, Skipped: o.Skipped}
	}
	for _, m := range s.Cluster.Members() {
		st.Members = append(st.Members, wire.MemberStatus{Member: m, Drifted: drifted(m.Meta.ConfigHash)})
	}
	if vs, err := s.Cluster.Voters(); err == nil && vs != nil {
		st.Voters = vs
	}
	return st
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, s.Status())
}

// Ready answers GET /readyz: 200 once this node is a member of a cluster
// with a leader that committed an epoch, 503 before (or after its Raft
// log halted).
func (s *Server) Ready(w http.ResponseWriter, r *http.Request) {
	st := s.Status()
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

// RunStates are the run states in the order the API's figures and the
// dashboard list them.
var RunStates = []jobs.State{jobs.Pending, jobs.Running, jobs.Succeeded, jobs.Failed, jobs.Fenced, jobs.TimedOut, jobs.Lost, jobs.Cancelled, jobs.Skipped}

// Paging of the job set (GET /api/v1/jobs and the Jobs page): a set of
// 100,000 jobs is never copied or rendered whole per request.
const (
	// defaultJobsLimit is the API's page when the request names none:
	// larger than most sets, so a small set's answer is the whole set.
	defaultJobsLimit = 1000
	maxJobsLimit     = 5000
)

// JobQuery reads a job search from a request: q (text in the name or a
// target tag), state (of the last run, or "never"), paused, cursor (an
// earlier answer's next) and limit.
func JobQuery(r *http.Request, defaultLimit int) (jobs.Query, error) {
	v := r.URL.Query()
	q := jobs.Query{Text: v.Get("q"), State: jobs.State(v.Get("state")), Limit: defaultLimit, Allow: readable(r)}
	if len(q.Text) > 200 {
		return q, BadRequest("q is at most 200 bytes")
	}
	if q.State != "" && q.State != jobs.NeverRan && !q.State.Known() {
		return q, BadRequest("state must be a run state or %q, got %q", jobs.NeverRan, q.State)
	}
	if p := v.Get("paused"); p != "" {
		b, err := strconv.ParseBool(p)
		if err != nil {
			return q, BadRequest("paused must be true or false, got %q", p)
		}
		q.Paused = b
	}
	if ns := v.Get("namespace"); ns != "" {
		if !jobs.ValidNamespace(ns) {
			return q, BadRequest("namespace %q: want a DNS label of 1-%d lowercase letters, digits and '-'", clipParam(ns), jobs.MaxNamespaceLen)
		}
		q.Namespace = ns
	}
	if c := v.Get("cursor"); c != "" {
		after, err := decodeJobCursor(c)
		if err != nil {
			return q, err
		}
		q.After = after
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxJobsLimit {
			return q, BadRequest("limit must be a number from 1 to %d, got %q", maxJobsLimit, l)
		}
		q.Limit = n
	}
	return q, nil
}

// A job cursor is opaque to clients: the name of the last job of a page,
// so a page resumes after it whatever was applied meanwhile.
func encodeJobCursor(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("j:" + name))
}

func decodeJobCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !bytes.HasPrefix(b, []byte("j:")) {
		return "", BadRequest("cursor %q is not one this server gave", clipParam(c))
	}
	return string(b[2:]), nil
}

func clipParam(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// findJobs returns a page of jobs as the API shows them (with their
// secrets if full, see auth.Guard.SeesSecrets), and the cursor of the next page (""
// if none).
func (s *Server) FindJobs(q jobs.Query, full bool) ([]wire.Job, string, jobs.Page) {
	page := s.State.FindJobs(q)
	now := s.Clock.Now()
	out := make([]wire.Job, 0, len(page.Jobs))
	for _, e := range page.Jobs {
		out = append(out, apiJob(e.Spec, e.LastRun, now, full))
	}
	next := ""
	if page.More && len(out) > 0 {
		next = encodeJobCursor(out[len(out)-1].Name)
	}
	return out, next, page
}

// apiJob is a job as the API shows it; without full, its secrets
// hidden (jobs.Redact).
func apiJob(spec jobs.Spec, last *jobs.Run, now time.Time, full bool) wire.Job {
	j := wire.Job{Spec: spec, Namespace: spec.NamespaceName(), LastRun: last}
	if !full {
		j.Spec, j.Redacted = jobs.Redact(spec)
	}
	// A paused job has no next fire time: it fires at none until resumed.
	if sched, err := spec.Schedule(); err == nil && !spec.Paused {
		j.NextFire = sched.Next(now)
	}
	return j
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	q, err := JobQuery(r, defaultJobsLimit)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	full, err := s.Guard.SeesSecrets(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	list, next, page := s.FindJobs(q, full)
	writeJobList(w, wire.JobList{Jobs: list, Next: next, Matched: page.Matched, Total: page.Total})
}

// job returns one job as the API shows it, with its secrets if full.
func (s *Server) Job(name string, full bool) (wire.Job, error) {
	spec, ok := s.State.Spec(name)
	if !ok {
		return wire.Job{}, fmt.Errorf("job %q: %w", name, jobs.ErrNotFound)
	}
	var last *jobs.Run
	if run, ok := s.State.LastRun(name); ok {
		last = &run
	}
	return apiJob(spec, last, s.Clock.Now(), full), nil
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	full, err := s.Guard.SeesSecrets(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	name, err := JobName(r, chi.URLParam(r, "name"))
	if err != nil {
		s.Error(w, r, err)
		return
	}
	j, err := s.Job(name, full)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, j)
}

// handleRuns lists runs, newest scheduled first, from the replicated
// state and this server's history (see history.go for the parameters).
func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	q, err := s.runQuery(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	page, err := s.ListRuns(q)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	// Nothing for a job the set does not hold: a typo, not "it never
	// ran" (a removed job's kept runs are still listed).
	if _, known := s.State.Spec(q.Job); q.Job != "" && q.Cursor == "" && len(page.Runs) == 0 && !known {
		s.Error(w, r, fmt.Errorf("runs of %q: %w", q.Job, jobs.ErrUnknownJob))
		return
	}
	WriteJSON(w, http.StatusOK, wire.RunList{Runs: nonNil(page.Runs), Next: page.Next})
}

// maxJobSetBody bounds PUT /api/v1/jobset: a job set's JSON
// (jobs.MaxSetBytes), which a follower forwards to the leader whole
// (scheduler/rpc takes a little more, for its own envelope).
const maxJobSetBody = jobs.MaxSetBytes

func (s *Server) handleApplyJobSet(w http.ResponseWriter, r *http.Request) {
	req, err := readJobSetRequest(w, r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	applied, err := s.applySet(r, req.Jobs, scheduler.KnownJobs{}, req.Source, "PUT /api/v1/jobset")
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if _, server := s.Cluster.RaftStats(); server && applied.Namespaces == nil {
		// A worker takes no apply by digest (421): nothing to prime. The
		// set as replicated, whose order is not the request's (a job
		// that stays keeps its place).
		if now := s.State.ExportJobSet(); now.Info.Hash == applied.Hash {
			s.digests.prime(applied.Hash, now.Jobs)
		}
	}
	WriteJSON(w, http.StatusOK, applied)
}

// readJobSetRequest reads and decodes the body of PUT /api/v1/jobset.
// The set is allocated once, at its size, rather than grown by doubling
// as it decodes (100,000 jobs would move some 80 MiB): a client that says
// how many jobs it sends (wire.JobCountHeader) has them decoded as they
// arrive (wire.ReadJobSetRequest); another's body is read whole first,
// and the list sized by the JSON (jobs.CountSpecs).
func readJobSetRequest(w http.ResponseWriter, r *http.Request) (wire.JobSetRequest, error) {
	count, _ := strconv.Atoi(r.Header.Get(wire.JobCountHeader))
	if count <= 0 {
		body, err := readJobSetBody(w, r)
		if err != nil {
			return wire.JobSetRequest{}, err
		}
		req, err := wire.DecodeJobSetRequest(body)
		if err != nil {
			return req, BadRequest("decode job set: %v", err)
		}
		return req, nil
	}
	req, err := wire.ReadJobSetRequest(http.MaxBytesReader(w, r.Body, maxJobSetBody), count)
	if err != nil {
		return req, bodyError(err)
	}
	return req, nil
}

// bodyError answers a job set's body that could not be read or decoded:
// past maxJobSetBody 413, else 400.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("%w: a job set is at most %d MiB of JSON (jobs.MaxSetBytes); split it or trim its specs", errTooLarge, maxJobSetBody>>20)
	}
	return BadRequest("%v", err)
}

// readJobSetBody reads the body of a request carrying a job set, at most
// maxJobSetBody bytes.
func readJobSetBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := readBody(http.MaxBytesReader(w, r.Body, maxJobSetBody), r.ContentLength, maxJobSetBody)
	if err != nil {
		return nil, bodyError(fmt.Errorf("read job set: %w", err))
	}
	return body, nil
}

// readBody reads body whole, into a buffer of the size the request
// says (size, if at most limit) rather than one grown by doubling: the
// digests of 100,000 jobs are some 4 MB, which io.ReadAll would copy
// and allocate twice over. At most maxReserve is set aside before the
// body arrives, so that requests that say much and send little do not
// hold memory they never fill.
func readBody(body io.Reader, size, limit int64) ([]byte, error) {
	if size <= 0 || size > limit {
		return io.ReadAll(body)
	}
	var b bytes.Buffer
	b.Grow(int(min(size, maxReserve)) + bytes.MinRead)
	_, err := b.ReadFrom(body)
	return b.Bytes(), err
}

// maxReserve bounds what readBody sets aside for a body before reading it.
const maxReserve = 8 << 20

// applySet replaces the job set with specs, or, for a token limited to
// some namespaces, the jobs of those namespaces (applyScope); known marks
// those of specs that are the replicated set's (scheduler.SetJobsKnown).
// source defaults to the path and the caller's address.
func (s *Server) applySet(r *http.Request, specs []jobs.Spec, known scheduler.KnownJobs, source, path string) (wire.JobSetApplied, error) {
	if source == "" {
		source = path + " from " + r.RemoteAddr
	}
	scope, err := applyScope(r, specs)
	if err != nil {
		return wire.JobSetApplied{}, err
	}
	hash, err := s.Scheduler.SetJobsKnown(r.Context(), specs, known, source, scope)
	if err != nil {
		return wire.JobSetApplied{}, err
	}
	return wire.JobSetApplied{Hash: hash, Source: source, Jobs: len(specs), Namespaces: scope}, nil
}

// handleTrigger starts a run now; ?force=true overrides the job's overlap
// policy, which the leader records in the audit trail.
func (s *Server) handleTrigger(w http.ResponseWriter, r *http.Request) {
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		f, err := strconv.ParseBool(v)
		if err != nil {
			s.Error(w, r, BadRequest("force must be true or false, got %q", v))
			return
		}
		force = f
	}
	name, err := JobName(r, chi.URLParam(r, "name"))
	if err != nil {
		s.Error(w, r, err)
		return
	}
	run, err := s.Scheduler.Trigger(r.Context(), name, force)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	s.answer(w, r, run)
}

func (s *Server) handlePause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, err := JobName(r, chi.URLParam(r, "name"))
		if err != nil {
			s.Error(w, r, err)
			return
		}
		if err := s.Scheduler.Pause(r.Context(), name, paused); err != nil {
			s.Error(w, r, err)
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
		s.Error(w, r, err)
		return
	}
	page, err := s.history().ListEvents(s.State.Events(0, 0), q)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, wire.EventList{Events: nonNil(page.Events), Counters: s.State.Counters(), Next: page.Next})
}

// Errors of the request itself: scheduler/wire's, under the names web's files
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

func BadRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// StatusOf is the HTTP status of err, from the one table in scheduler/wire.
func StatusOf(err error) int {
	status, _ := wire.StatusOf(err)
	return status
}

func (s *Server) Error(w http.ResponseWriter, r *http.Request, err error) {
	code := StatusOf(err)
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
	SetRetryAfter(w, err)
	if s.ErrorPage != nil && wantsHTML(r) {
		s.ErrorPage(w, r, code, err)
		return
	}
	WriteJSON(w, code, wire.Body(err))
}

// wantsHTML reports whether an error should be a page: a dashboard page,
// or a dashboard form posted without script.
func wantsHTML(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, "/api/") || strings.HasPrefix(r.URL.Path, "/internal/") || r.URL.Path == "/metrics" {
		return auth.IsForm(r) && strings.Contains(r.Header.Get("Accept"), "text/html")
	}
	return true
}

// answer writes v as JSON, or, for a dashboard form posted without
// script, sends the browser back to the page it came from.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, v any) {
	if auth.IsForm(r) && strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, auth.LocalPath(r.PostFormValue("back")), http.StatusSeeOther)
		return
	}
	WriteJSON(w, http.StatusOK, v)
}

// retryError is a refusal for now whose answer says when to try again.
type retryError struct {
	after time.Duration
	err   error
}

func (e *retryError) Error() string             { return e.err.Error() }
func (e *retryError) Unwrap() error             { return e.err }
func (e *retryError) RetryAfter() time.Duration { return e.after }

// SetRetryAfter sets Retry-After if err says when to try again: any
// error in its chain with a RetryAfter method (a refusal for now here, a
// lockout of web/auth).
func SetRetryAfter(w http.ResponseWriter, err error) {
	var re interface{ RetryAfter() time.Duration }
	if errors.As(err, &re) {
		// Whole seconds, rounded up, as Retry-After wants them.
		w.Header().Set("Retry-After", strconv.FormatInt(int64((re.RetryAfter()+time.Second-1)/time.Second), 10))
	}
}

func WriteJSON(w http.ResponseWriter, code int, v any) {
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

// JobName returns the qualified name of the job a request names: the
// {name} of its path (or, for runs and events, its job parameter) in the
// namespace of its namespace parameter, if any. A name qualified already
// ("billing:report") needs none; one whose namespace disagrees with the
// parameter is a bad request.
func JobName(r *http.Request, name string) (string, error) {
	ns := r.URL.Query().Get("namespace")
	if ns == "" || name == "" {
		return name, nil
	}
	if !jobs.ValidNamespace(ns) {
		return "", BadRequest("namespace %q: want a DNS label of 1-%d lowercase letters, digits and '-'", clipParam(ns), jobs.MaxNamespaceLen)
	}
	if !strings.Contains(name, ":") {
		return jobs.QualifiedName(ns, name), nil
	}
	if has, _ := jobs.SplitQualified(name); has != ns {
		return "", BadRequest("job %q is of namespace %s, not %s", clipParam(name), has, ns)
	}
	return name, nil
}

package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/history"
)

// History lists runs and events beyond the replicated state's hot window
// (scheduler/history.Store): it merges what it is given from the hot
// window with what it keeps, each once.
type History interface {
	ListRuns(hot []jobs.Run, q history.RunQuery) (history.RunPage, error)
	ListEvents(hot []jobs.Event, q history.EventQuery) (history.EventPage, error)
}

// hotOnly lists the hot window alone: a node that keeps no history (a
// worker's, which applies no log).
var hotOnly = &history.Store{}

func (s *Server) history() History {
	if s.History == nil {
		return hotOnly
	}
	return s.History
}

// listRuns lists runs of the replicated state and the history.
func (s *Server) ListRuns(q history.RunQuery) (history.RunPage, error) {
	return s.history().ListRuns(s.State.Runs(fsm.RunFilter{Job: q.Job}), q)
}

// Defaults of a listing's limit.
const (
	defaultRunLimit   = 100
	defaultEventLimit = 500
)

// runQuery reads GET /api/v1/runs's parameters: job (read in namespace,
// if given: JobName), namespace (without a job: that namespace's runs), state (one or more,
// comma-separated), since (an RFC 3339 time, or a duration such as 24h or
// 7d meaning that long ago), until (RFC 3339, exclusive), limit (1 to
// history.MaxRunLimit, default 100) and cursor (a page's next).
func (s *Server) runQuery(r *http.Request) (history.RunQuery, error) {
	v := r.URL.Query()
	q := history.RunQuery{Job: v.Get("job"), Cursor: v.Get("cursor"), Limit: defaultRunLimit, Allow: readable(r)}
	var err error
	if q.Job, err = JobName(r, q.Job); err != nil {
		return q, err
	}
	if ns := v.Get("namespace"); ns != "" && q.Job == "" {
		if !jobs.ValidNamespace(ns) {
			return q, BadRequest("namespace %q: want a DNS label of 1-%d lowercase letters, digits and '-'", clipParam(ns), jobs.MaxNamespaceLen)
		}
		q.Namespace = ns
	}
	if q.Limit, err = limitParam(v, defaultRunLimit, history.MaxRunLimit); err != nil {
		return q, err
	}
	if st := v.Get("state"); st != "" {
		for p := range strings.SplitSeq(st, ",") {
			state := jobs.State(strings.TrimSpace(p))
			if !state.Known() {
				return q, BadRequest("state %q: want one of pending, running, succeeded, failed, fenced, timed_out, lost, cancelled, skipped (comma-separated)", p)
			}
			q.States = append(q.States, state)
		}
	}
	q.Since, q.Until, err = s.timeRange(v)
	return q, err
}

// eventQuery reads GET /api/v1/events's parameters: job, kind, since and
// until (as for runs, on the event's time), after (a sequence number:
// only newer events), limit (1 to history.MaxEventLimit, default 500) and
// cursor.
func (s *Server) eventQuery(r *http.Request) (history.EventQuery, error) {
	v := r.URL.Query()
	q := history.EventQuery{Job: v.Get("job"), Kind: v.Get("kind"), Cursor: v.Get("cursor"), Allow: readable(r)}
	job, err := JobName(r, q.Job)
	if err != nil {
		return q, err
	}
	q.Job = job
	if a := v.Get("after"); a != "" {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return q, BadRequest("after must be an event sequence number, got %q", a)
		}
		q.After = n
	}
	if q.Limit, err = limitParam(v, defaultEventLimit, history.MaxEventLimit); err != nil {
		return q, err
	}
	q.Since, q.Until, err = s.timeRange(v)
	return q, err
}

func limitParam(v url.Values, def, most int) (int, error) {
	l := v.Get("limit")
	if l == "" {
		return def, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > most {
		return 0, BadRequest("limit must be a number from 1 to %d, got %q", most, l)
	}
	return n, nil
}

// timeRange reads since and until.
func (s *Server) timeRange(v url.Values) (since, until time.Time, err error) {
	if p := v.Get("since"); p != "" {
		if since, err = ParseSince(p, s.Clock.Now()); err != nil {
			return since, until, err
		}
	}
	if p := v.Get("until"); p != "" {
		if until, err = time.Parse(time.RFC3339, p); err != nil {
			return since, until, BadRequest("until must be an RFC 3339 time such as 2026-07-01T09:00:00Z, got %q", p)
		}
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return since, until, BadRequest("since (%s) must be before until (%s)", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	return since, until, nil
}

// ParseSince reads a since parameter: an RFC 3339 time, or a positive
// duration (24h, 7d, 1d12h) meaning that long before now.
func ParseSince(p string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, p); err == nil {
		return t, nil
	}
	d, err := jobs.ParseDuration(p)
	if err != nil || d <= 0 {
		return time.Time{}, BadRequest("since must be an RFC 3339 time such as 2026-07-01T09:00:00Z or a duration such as 24h or 7d, got %q", p)
	}
	return now.Add(-d), nil
}

package web

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/web/api"
)

// backfillSched adds a recorded Backfill to the fixture's scheduler.
type backfillSched struct {
	api.Scheduler
	mu   sync.Mutex
	reqs []fsm.BackfillRequest
}

func (b *backfillSched) Backfill(_ context.Context, req fsm.BackfillRequest) (fsm.BackfillResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reqs = append(b.reqs, req)
	return fsm.BackfillResult{Job: req.Job, From: req.From, To: req.To, DryRun: req.DryRun, MaxRunning: req.MaxRunning}, nil
}

// POST /api/v1/jobs/{name}/backfill takes the API token (or loopback) as
// every change does, reads dates in the job's zone, and refuses what it
// cannot read before anything reaches the leader.
func TestServer_Backfill(t *testing.T) {
	const token = "the-api-token-0123456789"
	var open, guarded backfillSched
	fo := newFixture(t, func(s *Server) { open.Scheduler = s.Scheduler; s.Scheduler = &open })
	fg := newFixture(t, func(s *Server) { guarded.Scheduler = s.Scheduler; s.Scheduler = &guarded; s.APIToken = token })
	fr := newFixture(t, func(s *Server) { s.ReadOnly = true })
	for _, tc := range []struct {
		name   string
		f      *fixture
		body   string
		header []string
		code   int
		msg    string
	}{
		{"open", fo, `{"from": "2026-07-01", "to": "2026-07-04T00:00:00Z", "dry_run": true}`, nil, 200, `"dry_run": true`},
		{"unknown job", fo, `{"from": "2026-07-01", "to": "2026-07-04"}`, nil, 400, "unknown job"},
		{"bad time", fo, `{"from": "yesterday", "to": "2026-07-04"}`, nil, 400, "want an RFC 3339 time"},
		{"unknown field", fo, `{"from": "2026-07-01", "to": "2026-07-04", "max": 3}`, nil, 400, "unknown field"},
		{"guarded without token", fg, `{"from": "2026-07-01", "to": "2026-07-04"}`, nil, 401, "needs the API token"},
		{"guarded with token", fg, `{"from": "2026-07-01", "to": "2026-07-04", "max_running": 2}`, []string{"Authorization", "Bearer " + token}, 200, `"max_running": 2`},
		{"read-only", fr, `{"from": "2026-07-01", "to": "2026-07-04"}`, nil, 403, "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/api/v1/jobs/report/backfill"
			if tc.name == "unknown job" {
				path = "/api/v1/jobs/nope/backfill"
			}
			code, _, body := tc.f.do(t, http.MethodPost, path, tc.body, append([]string{"Content-Type", "application/json"}, tc.header...)...)
			if code != tc.code || !strings.Contains(body, tc.msg) {
				t.Errorf("POST %s = %d\n%s\nwant %d with %q", path, code, body, tc.code, tc.msg)
			}
		})
	}
	// "2026-07-01" is midnight in the job's zone (report: Europe/Berlin).
	if len(open.reqs) != 1 || !open.reqs[0].From.Equal(time.Date(2026, 6, 30, 22, 0, 0, 0, time.UTC)) || !open.reqs[0].To.Equal(time.Date(2026, 7, 4, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("open node's backfills = %+v, want one from 2026-06-30T22:00Z to 2026-07-04T00:00Z", open.reqs)
	}
	if len(guarded.reqs) != 1 || guarded.reqs[0].MaxRunning != 2 {
		t.Errorf("guarded node's backfills = %+v, want one with max_running 2", guarded.reqs)
	}
}

package web

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// releasingScheduler is the fixture's scheduler that also releases.
type releasingScheduler struct {
	*fakeScheduler
	attempt, reason, asker string
}

func (r *releasingScheduler) Release(_ context.Context, attempt, reason, asker string) (jobs.Run, error) {
	r.attempt, r.reason, r.asker = attempt, reason, asker
	return jobs.Run{ID: reportRun, Job: "report", State: jobs.Pending}, nil
}

func TestServer_Release(t *testing.T) {
	const token = "the-api-token-0123456789"
	rs := &releasingScheduler{fakeScheduler: &fakeScheduler{}}
	f := newFixture(t, func(s *Server) { s.APIToken = token; s.Scheduler = rs })
	path := "/api/v1/attempts/" + reportRun + ".2/release"

	t.Run("needs the token", func(t *testing.T) {
		if code, _, body := f.do(t, http.MethodPost, path, `{"reason":"stuck"}`); code != http.StatusUnauthorized {
			t.Errorf("without the token: %d %s", code, body)
		}
		if rs.attempt != "" {
			t.Errorf("released %s without the token", rs.attempt)
		}
	})
	t.Run("needs a reason", func(t *testing.T) {
		code, _, body := f.do(t, http.MethodPost, path, `{}`, "Authorization", "Bearer "+token)
		if code != http.StatusBadRequest || !strings.Contains(body, "reason is required") {
			t.Errorf("without a reason: %d %s", code, body)
		}
	})
	t.Run("names the asker", func(t *testing.T) {
		code, _, body := f.do(t, http.MethodPost, path, `{"reason":"stuck on NFS"}`, "Authorization", "Bearer "+token)
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
		if rs.attempt != reportRun+".2" || rs.reason != "stuck on NFS" || rs.asker != "api.token (bearer) from 127.0.0.1" {
			t.Errorf("released %q for %q as asked by %q", rs.attempt, rs.reason, rs.asker)
		}
	})
}

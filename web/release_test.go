package web

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

// releasingScheduler is the fixture's scheduler, recording a release.
type releasingScheduler struct {
	*fakeScheduler
	attempt, reason, asker string
}

func (r *releasingScheduler) Release(_ context.Context, attempt, reason, asker string) (scheduler.Released, error) {
	r.attempt, r.reason, r.asker = attempt, reason, asker
	return scheduler.Released{Run: jobs.Run{ID: reportRun, Job: "report", State: jobs.Pending},
		Floor: scheduler.StoreFloor{Job: "report", Raised: true, Token: jobs.Fence{Epoch: 4, Seq: 15}}}, nil
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
		// The answer is the run, with what became of the store floor.
		for _, want := range []string{`"id": "` + reportRun + `"`, `"store_floor": {`, `"raised": true`, `"seq": 15`} {
			if !strings.Contains(body, want) {
				t.Errorf("answer lacks %s: %s", want, body)
			}
		}
	})
}

// The job page offers a release form for a run's open attempt; posted
// without script, it releases with the reason typed and goes back.
func TestServer_ReleaseForm(t *testing.T) {
	rs := &releasingScheduler{fakeScheduler: &fakeScheduler{}}
	f := newFixture(t, func(s *Server) { s.Scheduler = rs })
	open := jobs.Run{ID: "report@20260901T090000Z", Job: "report", ScheduledAt: at(40), State: jobs.Running,
		Attempts: []jobs.Attempt{{ID: "report@20260901T090000Z.1", Number: 1, Worker: "w2", State: jobs.Running, Token: jobs.Fence{Epoch: 4, Seq: 30}}}}
	f.state.mu.Lock()
	f.state.runs = append([]jobs.Run{open}, f.state.runs...)
	f.state.mu.Unlock()
	code, _, page := f.get(t, "/jobs/report")
	if code != http.StatusOK || !strings.Contains(page, `action="/api/v1/attempts/report@20260901T090000Z.1/release"`) {
		t.Fatalf("job page (%d) has no release form for the open attempt", code)
	}
	// The placeholder fits: "why release it (kept in the audit trail)".
	if !strings.Contains(page, `name="reason" required maxlength="512" size="44" placeholder="why release it (kept in the audit trail)"`) {
		t.Error("the reason's box is narrower than its placeholder")
	}
	if strings.Count(page, `data-action="release"`) != 1 {
		t.Errorf("release forms: %d, want 1 (ended attempts have none)", strings.Count(page, `data-action="release"`))
	}
	code, hdr, body := f.do(t, http.MethodPost, "/api/v1/attempts/report@20260901T090000Z.1/release", "reason=hung&back=%2Fjobs%2Freport",
		"Content-Type", "application/x-www-form-urlencoded", "Accept", "text/html")
	if code != http.StatusSeeOther || hdr.Get("Location") != "/jobs/report" {
		t.Errorf("form post: %d to %q: %s", code, hdr.Get("Location"), body)
	}
	if rs.reason != "hung" || rs.asker != "loopback 127.0.0.1" {
		t.Errorf("released for %q by %q", rs.reason, rs.asker)
	}
}

// A released attempt is tagged as such in the runs table, its reason shown.
func TestServer_ReleasedAttemptShown(t *testing.T) {
	f := newFixture(t)
	done := jobs.Run{ID: "report@20260901T090000Z", Job: "report", ScheduledAt: at(40), State: jobs.Lost,
		Attempts: []jobs.Attempt{{ID: "report@20260901T090000Z.1", Number: 1, Worker: "w2", State: jobs.Lost, Expired: true,
			Error: "released by api.token (bearer) from 10.0.0.7: hung on NFS", Token: jobs.Fence{Epoch: 4, Seq: 30}}}}
	f.state.mu.Lock()
	f.state.runs = append([]jobs.Run{done}, f.state.runs...)
	f.state.mu.Unlock()
	_, _, page := f.get(t, "/jobs/report")
	for _, want := range []string{">released</span>", "released by api.token (bearer) from 10.0.0.7: hung on NFS"} {
		if !strings.Contains(page, want) {
			t.Errorf("the job page lacks %q", want)
		}
	}
}

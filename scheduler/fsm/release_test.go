package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func release(attempt, reason, asker string) replicated.Command {
	return replicated.Command{Op: replicated.OpRelease, Release: &replicated.ReleaseCmd{Attempt: attempt, Reason: reason, Asker: asker, At: t0}}
}

func TestFSM_Release(t *testing.T) {
	t.Run("retried with a newer token", func(t *testing.T) {
		f := withSpecs(t, jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true", Retries: 1})
		res := applyAt(t, f, 2, 10, grant("report", t0))
		a, _ := res.Run.Latest()
		applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpStart, Start: &replicated.StartCmd{Attempt: a.ID, At: t0}})
		res = applyAt(t, f, 2, 12, release(a.ID, "stuck on a dead NFS mount", "api.token (bearer) from 127.0.0.1"))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if got, want := res.Run.State, jobs.Pending; got != want {
			t.Fatalf("run state = %s, want %s (its retry is due)", got, want)
		}
		got, _ := res.Run.Latest()
		if got.State != jobs.Lost || !got.Expired || !strings.Contains(got.Error, "stuck on a dead NFS mount") {
			t.Errorf("released attempt = %s expired=%v error %q", got.State, got.Expired, got.Error)
		}
		ev := f.Events(0, 0)
		last := ev[len(ev)-1]
		if last.Kind != jobs.EventReleased || !strings.Contains(last.Detail, "api.token (bearer) from 127.0.0.1") ||
			!strings.Contains(last.Detail, "stuck on a dead NFS mount") || last.Attempt != a.ID {
			t.Errorf("last event = %+v, want a release naming asker and reason", last)
		}
		// The retry's token is newer than the released one's.
		res = applyAt(t, f, 3, 15, replicated.Command{Op: replicated.OpRetry, Retry: &replicated.RetryCmd{Run: res.Run.ID, After: 1, Worker: "w2", At: t0}})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		next, _ := res.Run.Latest()
		if !(next.Token.Epoch > a.Token.Epoch || next.Token.Seq > a.Token.Seq) || next.Number != 2 {
			t.Errorf("retry attempt %s token %s, released token %s", next.ID, next.Token, a.Token)
		}
		if got := f.Counters()[CounterReleases]; got != 1 {
			t.Errorf("releases counter = %d, want 1", got)
		}
	})
	t.Run("no retries left ends the run lost", func(t *testing.T) {
		f := withJobs(t, "report")
		res := applyAt(t, f, 2, 10, grant("report", t0))
		a, _ := res.Run.Latest()
		res = applyAt(t, f, 2, 11, release(a.ID, "hung", "loopback 127.0.0.1"))
		if res.Err != nil || res.Run.State != jobs.Lost {
			t.Fatalf("run = %s, err %v; want lost", res.Run.State, res.Err)
		}
	})
	t.Run("an ended or superseded attempt is refused, changing nothing", func(t *testing.T) {
		f := withJobs(t, "report")
		res := applyAt(t, f, 2, 10, grant("report", t0))
		a, _ := res.Run.Latest()
		code := 0
		applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: a.ID, State: jobs.Succeeded, ExitCode: &code, EndedAt: t0}})
		before := len(f.Events(0, 0))
		res = applyAt(t, f, 2, 12, release(a.ID, "too late", "loopback 127.0.0.1"))
		if !errors.Is(res.Err, jobs.ErrStaleAttempt) || !strings.Contains(res.Err.Error(), "already ended succeeded") {
			t.Errorf("release of an ended attempt: err %v, want ErrStaleAttempt saying it ended", res.Err)
		}
		if res.Run.State != jobs.Succeeded || len(f.Events(0, 0)) != before {
			t.Errorf("a refused release changed the run (%s) or the trail", res.Run.State)
		}
		if res := applyAt(t, f, 2, 13, release("report@nosuch.1", "x", "y")); !errors.Is(res.Err, jobs.ErrNotFound) {
			t.Errorf("release of an unknown attempt: err %v, want ErrNotFound", res.Err)
		}
	})
}

func TestCheckRelease(t *testing.T) {
	if err := CheckRelease("report@20260701T090005Z.1", " "); !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Errorf("empty reason: err %v", err)
	}
	if err := CheckRelease("nonsense", "why"); !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Errorf("malformed attempt: err %v", err)
	}
	if err := CheckRelease("report@20260701T090005Z.1", strings.Repeat("x", maxReleaseReason+1)); !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Errorf("long reason: err %v", err)
	}
	if err := CheckRelease("report@20260701T090005Z.1", "why"); err != nil {
		t.Errorf("good release: %v", err)
	}
}

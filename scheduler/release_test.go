package scheduler

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/jobs"
)

func release(attempt, reason, asker string) command {
	return command{Op: opRelease, Release: &releaseCmd{Attempt: attempt, Reason: reason, Asker: asker, At: t0}}
}

func TestFSM_Release(t *testing.T) {
	t.Run("retried with a newer token", func(t *testing.T) {
		f := withSpecs(t, jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true", Retries: 1})
		res := applyAt(t, f, 2, 10, grant("report", t0))
		a, _ := res.Run.Latest()
		applyAt(t, f, 2, 11, command{Op: opStart, Start: &startCmd{Attempt: a.ID, At: t0}})
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
		res = applyAt(t, f, 3, 15, command{Op: opRetry, Retry: &retryCmd{Run: res.Run.ID, After: 1, Worker: "w2", At: t0}})
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
		applyAt(t, f, 2, 11, command{Op: opComplete, Complete: &Completion{Attempt: a.ID, State: jobs.Succeeded, ExitCode: &code, EndedAt: t0}})
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

// floorlessStore is a store whose RaiseFloor fails as an unreachable
// store does, until fixed.
type floorlessStore struct {
	fencedstore.Store
	down atomic.Bool
}

func (s *floorlessStore) RaiseFloor(ctx context.Context, job string, tok fencedstore.Token) (fencedstore.Token, error) {
	if s.down.Load() {
		return fencedstore.Token{}, fmt.Errorf("raise floor of job %s: %w: connection refused", job, fencedstore.ErrUnavailable)
	}
	return s.Store.RaiseFloor(ctx, job, tok)
}

// A release raises the job's floor at the store to the released token:
// the token (which the worker had established) is refused from then on,
// on its key and on every other key of the job, while a newer one is
// not. A store that cannot be reached leaves the lease released and says
// the floor is not raised; releasing the attempt again raises it.
func TestScheduler_ReleaseRaisesTheStoreFloor(t *testing.T) {
	s := spec("report", jobs.MisfireLatest, jobs.OverlapAllow)
	s.Retries = 1
	l, _ := newTestLeader(t, s)
	l.s.term.Store(l)
	bs := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if err := bs.Open(); err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	store := &floorlessStore{Store: bs}
	l.s.Store = store
	ctx := context.Background()
	grantOne := func(at time.Time) jobs.Attempt {
		t.Helper()
		res, err := l.s.applyLocalCmd(ctx, grant("report", at))
		if err != nil {
			t.Fatal(err)
		}
		a, _ := res.Run.Latest()
		return *a
	}
	tokOf := func(a jobs.Attempt) fencedstore.Token {
		return a.Token
	}
	publish := func(key string, tok fencedstore.Token) fencedstore.Result {
		t.Helper()
		res, err := bs.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tok, Attempt: "x", Job: "report", Body: []byte("x")})
		if err != nil && !fencedstore.IsDecision(err) {
			t.Fatal(err)
		}
		return res
	}

	a := grantOne(base)
	if res, err := bs.Establish(ctx, fencedstore.EstablishRequest{Key: "report/out", Token: tokOf(a), Attempt: a.ID, Job: "report"}); err != nil {
		t.Fatalf("establish: %+v, %v", res, err)
	}
	rel, err := l.s.Release(ctx, a.ID, "wedged", "loopback 127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if f := rel.Floor; !f.Raised || f.Job != "report" || f.Token != a.Token || f.Error != "" || rel.Again {
		t.Errorf("release answer: %+v again=%v; want the floor of report raised to %s", f, rel.Again, a.Token)
	}
	for _, key := range []string{"report/out", "report/elsewhere"} {
		if res := publish(key, tokOf(a)); res.Outcome != fencedstore.StaleOwner || res.Floor != tokOf(a) {
			t.Errorf("the released token on %s: %+v, want stale_owner naming the floor", key, res)
		}
	}
	if res := publish("report/elsewhere", fencedstore.Token{Epoch: a.Token.Epoch, Seq: a.Token.Seq + 100}); res.Outcome != fencedstore.Applied {
		t.Errorf("a newer token of the job: %+v, want applied", res)
	}

	// The store down: the lease is released all the same, and the answer
	// says the floor is not.
	b := grantOne(base.Add(time.Hour))
	store.down.Store(true)
	rel, err = l.s.Release(ctx, b.ID, "wedged too", "loopback 127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := rel.Run.Latest(); got.ID != b.ID || got.State != jobs.Lost {
		t.Errorf("released attempt %s is %s, want %s lost", got.ID, got.State, b.ID)
	}
	if f := rel.Floor; f.Raised || f.Token != b.Token || !strings.Contains(f.Error, "connection refused") {
		t.Errorf("release with the store down: floor %+v, want not raised, naming why", f)
	}
	if res := publish("report/b", tokOf(b)); res.Outcome != fencedstore.Applied {
		t.Fatalf("the unfenced token before the floor is raised: %+v", res)
	}
	// Released again, with the store back: nothing more to end, the
	// floor raised.
	store.down.Store(false)
	rel, err = l.s.Release(ctx, b.ID, "again", "loopback 127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Again || !rel.Floor.Raised || rel.Floor.Token != b.Token {
		t.Errorf("second release: again=%v floor %+v; want the floor raised to %s", rel.Again, rel.Floor, b.Token)
	}
	if res := publish("report/b", tokOf(b)); res.Outcome != fencedstore.StaleOwner {
		t.Errorf("the released token after the second release: %+v, want stale_owner", res)
	}
	// An attempt that ended otherwise is still nothing to release.
	c := grantOne(base.Add(2 * time.Hour))
	code := 0
	if _, err := l.s.applyLocalCmd(ctx, command{Op: opComplete, Complete: &Completion{Attempt: c.ID, State: jobs.Succeeded, ExitCode: &code, EndedAt: base}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.s.Release(ctx, c.ID, "late", "loopback 127.0.0.1"); !errors.Is(err, jobs.ErrStaleAttempt) {
		t.Errorf("release of a succeeded attempt: err %v, want ErrStaleAttempt", err)
	}
}

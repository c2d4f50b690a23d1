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
	"github.com/fencecron/fencecron/scheduler/replicated"
)

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
	if _, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: c.ID, State: jobs.Succeeded, ExitCode: &code, EndedAt: base}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.s.Release(ctx, c.ID, "late", "loopback 127.0.0.1"); !errors.Is(err, jobs.ErrStaleAttempt) {
		t.Errorf("release of a succeeded attempt: err %v, want ErrStaleAttempt", err)
	}
}

// lateRaft applies every entry but answers as election.Node does when
// the caller's context ended first: with that context's error, whatever
// became of the entry.
type lateRaft struct{ *fakeRaft }

func (r lateRaft) Apply(ctx context.Context, cmd []byte) (any, error) {
	res, err := r.fakeRaft.Apply(ctx, cmd)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, err
}

// An asker that goes away while its release commits (a client's timeout)
// does not leave the released token good at the store: the leader waits
// for the release's answer and raises the floor all the same.
func TestScheduler_ReleaseOutlivesItsAsker(t *testing.T) {
	l, _ := newTestLeader(t, spec("report", jobs.MisfireLatest, jobs.OverlapAllow))
	l.s.term.Store(l)
	l.s.Raft = lateRaft{l.s.Raft.(*fakeRaft)}
	bs := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if err := bs.Open(); err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	l.s.Store = bs
	res, err := l.s.applyLocalCmd(t.Context(), grant("report", base))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := res.Run.Latest()
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	rel, err := l.s.Release(gone, a.ID, "wedged", "loopback 127.0.0.1")
	if err != nil || !rel.Floor.Raised || rel.Floor.Token != a.Token {
		t.Fatalf("release by an asker gone: %+v, %v; want the floor of report raised to %s", rel.Floor, err, a.Token)
	}
	out, err := bs.Publish(t.Context(), fencedstore.PublishRequest{Key: "report/out", Token: a.Token, Attempt: a.ID, Job: "report", Body: []byte("x")})
	if out.Outcome != fencedstore.StaleOwner {
		t.Errorf("the released token at the store: %+v, %v; want stale_owner", out, err)
	}
}

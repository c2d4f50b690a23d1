package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
)

// Clock is a settable clock for a store under test.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// RunRetention checks retention (the store must be a fencedstore.Sweeper),
// kept versions and paged listing against stores made by newStore. The
// suite sets Options.Now to its own clock.
func RunRetention(t *testing.T, newStore OptionsFactory) {
	open := retentionOpen(newStore)
	t.Run("ByAgeTrimsExactly", func(t *testing.T) { testSweepByAge(t, open) })
	t.Run("ByCountKeepsNewest", func(t *testing.T) { testSweepByCount(t, open) })
	t.Run("SweepSkipsOtherPrefixes", func(t *testing.T) { testSweepSkipsOtherPrefixes(t, open) })
	t.Run("ConcurrentWithSweeps", func(t *testing.T) { testSweepConcurrent(t, open) })
	t.Run("TombstoneRefusesStaleTokens", func(t *testing.T) { testTombstoneRefusesStale(t, open) })
	t.Run("TombstoneDropRaisesFloor", func(t *testing.T) { testTombstoneDrop(t, open) })
	t.Run("Versions", func(t *testing.T) { testKeptVersions(t, open) })
	t.Run("ListPage", func(t *testing.T) { testListPage(t, open) })
}

// retentionStart is where every retention sub-test's clock starts, so
// that ages and cut-offs read as offsets from one instant.
var retentionStart = time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)

// retentionOpener makes a store keeping keep versions per key, on a clock
// of its own set to retentionStart.
type retentionOpener func(t *testing.T, keep int) (fencedstore.Store, fencedstore.Sweeper, *Clock)

// retentionOpen fails a sub-test whose store cannot sweep: retention is
// part of the contract, not an optional extra.
func retentionOpen(newStore OptionsFactory) retentionOpener {
	return func(t *testing.T, keep int) (fencedstore.Store, fencedstore.Sweeper, *Clock) {
		clock := NewClock(retentionStart)
		s := newStore(t, Options{MaxBodyBytes: fencedstore.DefaultMaxBodyBytes, HistoryRetention: fencedstore.DefaultHistoryRetention, Now: clock.Now, KeepVersions: keep})
		sw, ok := s.(fencedstore.Sweeper)
		if !ok {
			t.Fatalf("%T is not a fencedstore.Sweeper", s)
		}
		return s, sw, clock
	}
}

// testSweepByAge pins the age cut-off to the instant: a key changed
// exactly at it is kept, so that no two backends disagree about it.
func testSweepByAge(t *testing.T, open retentionOpener) {
	s, sw, clock := open(t, 1)
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		clock.Set(retentionStart.Add(time.Duration(i) * time.Hour))
		mustPublish(t, s, fmt.Sprintf("a/%d", i), T(1, uint64(i)), "x")
	}
	mustPublish(t, s, "b/1", T(1, 10), "other prefix, just as old")
	clock.Set(retentionStart.Add(6 * time.Hour))
	rule := fencedstore.RetentionRule{Prefix: "a/", MaxAge: 3 * time.Hour}
	// Cut-off start+3h: a/1 and a/2 are older; a/3, changed exactly at
	// the cut-off, is not.
	got := sweepAll(t, sw, rule, clock.Now(), 1)
	if want := []string{"a/1", "a/2"}; !slices.Equal(got.ByAge, want) || len(got.ByCount) != 0 {
		t.Fatalf("deleted by age %v by count %v, want %v by age", got.ByAge, got.ByCount, want)
	}
	checkKeys(t, s, "", "a/3", "a/4", "a/5", "b/1")
	if _, err := s.Get(ctx, "a/1"); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Errorf("get of a deleted key: err = %v, want ErrNotFound", err)
	}
	if again := sweepAll(t, sw, rule, clock.Now(), 10); len(again.ByAge)+len(again.ByCount) != 0 {
		t.Errorf("a second sweep deleted %v %v; want nothing", again.ByAge, again.ByCount)
	}
}

// testSweepByCount ranks keys by their last change, establishes
// included: an establish is a writer claiming the key.
func testSweepByCount(t *testing.T, open retentionOpener) {
	s, sw, clock := open(t, 1)
	ctx := context.Background()
	for i := 1; i <= 7; i++ {
		clock.Set(retentionStart.Add(time.Duration(i) * time.Minute))
		mustPublish(t, s, fmt.Sprintf("c/%d", i), T(1, uint64(i)), "x")
	}
	// An establish is a change: c/1 becomes the newest.
	clock.Set(retentionStart.Add(time.Hour))
	expect(t, fencedstore.Established)(s.Establish(ctx, fencedstore.EstablishRequest{Key: "c/1", Token: T(2, 1), Attempt: "b"}))
	got := sweepAll(t, sw, fencedstore.RetentionRule{Prefix: "c/", MaxKeys: 4}, clock.Now(), 2)
	if want := []string{"c/2", "c/3", "c/4"}; !slices.Equal(got.ByCount, want) || len(got.ByAge) != 0 {
		t.Fatalf("deleted by count %v by age %v, want %v by count", got.ByCount, got.ByAge, want)
	}
	checkKeys(t, s, "c/", "c/1", "c/5", "c/6", "c/7")
}

// testSweepSkipsOtherPrefixes guards against a sweep whose small batches
// stall on old keys under other prefixes and never reach its own.
func testSweepSkipsOtherPrefixes(t *testing.T, open retentionOpener) {
	// Many keys under another prefix, all older than the rule's:
	// small batches still get through them to the rule's keys.
	s, sw, clock := open(t, 1)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 240; i += 8 {
				req := fencedstore.PublishRequest{Key: fmt.Sprintf("other/%03d", i), Token: T(1, uint64(i+1)), Attempt: "a", Body: []byte("x")}
				if _, err := s.Publish(context.Background(), req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	clock.Set(retentionStart.Add(time.Hour))
	for i := 1; i <= 4; i++ {
		mustPublish(t, s, fmt.Sprintf("mine/%d", i), T(2, uint64(i)), "x")
	}
	clock.Set(retentionStart.Add(48 * time.Hour))
	got := sweepAll(t, sw, fencedstore.RetentionRule{Prefix: "mine/", MaxAge: 24 * time.Hour, MaxKeys: 10}, clock.Now(), 1)
	if want := []string{"mine/1", "mine/2", "mine/3", "mine/4"}; !slices.Equal(got.ByAge, want) {
		t.Errorf("deleted %v, want %v", got.ByAge, want)
	}
	if ms, _ := s.List(context.Background(), "other/"); len(ms) != 240 {
		t.Errorf("%d keys left under other/, want 240", len(ms))
	}
}

// testSweepConcurrent runs retention under the Concurrent workload:
// deleting must never let out an answer the fenced-register model forbids.
func testSweepConcurrent(t *testing.T, open retentionOpener) {
	// The workload of the Concurrent test while retention keeps
	// deleting all but one key: every answer must still be one the
	// fenced-register model with deletions allows.
	s, sw, clock := open(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := []string{"cr/a", "cr/b", "cr/c"}
	var rec fencemodel.Recorder
	w := fencemodel.Workload{Keys: keys, Clients: 8, Calls: 60, Seed: uint64(time.Now().UnixNano())}
	done, workDone := make(chan struct{}), make(chan struct{})
	deleted := 0
	var sweepErr error
	go func() {
		defer close(done)
		for i := 0; i < 2000 && ctx.Err() == nil; i++ {
			res, err := rec.Sweep(ctx, sw, 1000, fencedstore.RetentionRule{Prefix: "cr/", MaxKeys: 1}, clock.Now(), 2)
			if err != nil {
				sweepErr = err
				return
			}
			deleted += len(res.ByCount)
			select {
			case <-workDone:
				return
			default:
			}
		}
	}()
	cnt := w.Run(ctx, s, &rec)
	close(workDone)
	<-done
	t.Logf("seed %d: %s; %d keys deleted", w.Seed, cnt, deleted)
	if sweepErr != nil {
		t.Fatal(sweepErr)
	}
	if cnt.Unknown > 0 {
		t.Fatalf("%d calls failed; first: %v", cnt.Unknown, cnt.FirstError)
	}
	if deleted == 0 {
		t.Error("the sweeps deleted nothing while the workload ran")
	}
	ops := rec.Operations()
	if res, _ := fencemodel.Check(ops, 30*time.Second); res != porcupine.Ok {
		t.Errorf("history of %d calls and deletions is %s under the fenced-register model", len(ops), res)
	}
	for _, k := range keys {
		h, err := s.History(ctx, k)
		if errors.Is(err, fencedstore.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := fencemodel.CheckHistory(h); err != nil {
			t.Errorf("history %s: %v", k, err)
		}
	}
}

// testTombstoneRefusesStale is why a deletion leaves a tombstone: without
// one, a writer holding an old token could bring a swept key back.
func testTombstoneRefusesStale(t *testing.T, open retentionOpener) {
	s, sw, clock := open(t, 3)
	ctx := context.Background()
	const key = "r/2026-07.csv"
	mustPublish(t, s, key, T(3, 5), "v1")
	mustPublish(t, s, key, T(3, 7), "v2")
	clock.Set(retentionStart.Add(48 * time.Hour))
	if got := sweepAll(t, sw, fencedstore.RetentionRule{Prefix: "r/", MaxAge: 24 * time.Hour}, clock.Now(), 10); !slices.Equal(got.ByAge, []string{key}) {
		t.Fatalf("deleted %v, want [%s]", got.ByAge, key)
	}
	checkKeys(t, s, "r/")
	for _, tok := range []fencedstore.Token{T(3, 7), T(3, 6), T(1, 1)} {
		res, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tok, Attempt: "old", Body: []byte("resurrected")})
		if !errors.Is(err, fencedstore.ErrStaleOwner) || res.Greatest != T(3, 7) {
			t.Errorf("publish with %s on the tombstone: %+v, %v; want stale_owner against 3.7", tok, res, err)
		}
		if _, err := s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: tok, Attempt: "old"}); !errors.Is(err, fencedstore.ErrStaleOwner) {
			t.Errorf("establish with %s on the tombstone: %v; want stale_owner", tok, err)
		}
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Fatalf("a stale token brought the key back: get err = %v", err)
	}
	checkKeys(t, s, "r/")
	res, _ := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(3, 8), Attempt: "new", Body: []byte("v1 again")})
	if res.Outcome != fencedstore.Applied || res.Version != 1 {
		t.Errorf("a newer token on the tombstone: %+v; want applied, version 1", res)
	}
	if obj, err := s.Get(ctx, key); err != nil || string(obj.Body) != "v1 again" {
		t.Errorf("get after recreation: %q, %v", obj.Body, err)
	}
	if _, err := fencedstore.GetVersion(ctx, s, key, 2); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Errorf("a version from before the deletion is readable: err = %v", err)
	}
	h, err := s.History(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h[0].Outcome != fencedstore.Deleted || h[0].Greatest != T(3, 7) || len(h) != 8 {
		t.Errorf("history = %+v; want it to open with the deletion holding 3.7, then 6 refusals and the new write", h)
	}
	if err := fencemodel.CheckHistory(h); err != nil {
		t.Errorf("the tombstone's history does not replay: %v", err)
	}
}

// testTombstoneDrop checks that dropping tombstones does not forget their
// tokens: the prefix's floor takes them over.
func testTombstoneDrop(t *testing.T, open retentionOpener) {
	s, sw, clock := open(t, 1)
	ctx := context.Background()
	mustPublish(t, s, "f/old", T(5, 50), "x")
	mustPublish(t, s, "f/young", T(5, 60), "y")
	clock.Set(retentionStart.Add(10 * time.Hour))
	mustPublish(t, s, "f/young", T(5, 61), "y2")
	deletedAt := retentionStart.Add(20 * time.Hour)
	clock.Set(deletedAt)
	sweepAll(t, sw, fencedstore.RetentionRule{Prefix: "f/", MaxAge: 15 * time.Hour}, clock.Now(), 10)
	if n, _, err := sw.DropTombstones(ctx, deletedAt, 10); err != nil || n != 0 {
		t.Fatalf("dropped %d tombstones made at the cut-off (err %v), want 0", n, err)
	}
	if n, more, err := sw.DropTombstones(ctx, deletedAt.Add(time.Second), 10); err != nil || n != 1 || more {
		t.Fatalf("DropTombstones = %d, %v, %v; want 1, false, nil", n, more, err)
	}
	if _, err := s.History(ctx, "f/old"); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Errorf("a dropped tombstone kept its history: err = %v", err)
	}
	// The floor of f/ is now 5.50: no token up to it writes under f/,
	// on the old key or on one never seen; newer ones and other
	// prefixes are not affected.
	for _, key := range []string{"f/old", "f/never-seen"} {
		if res, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(5, 50), Attempt: "old", Body: []byte("z")}); !errors.Is(err, fencedstore.ErrStaleOwner) || res.Greatest != T(5, 50) {
			t.Errorf("publish 5.50 on %s after the tombstone went: %+v, %v; want stale_owner against the floor", key, res, err)
		}
	}
	expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: "f/never-seen", Token: T(5, 51), Attempt: "new", Body: []byte("z")}))
	expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: "g/other", Token: T(1, 1), Attempt: "other", Body: []byte("z")}))
	expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: "f/young", Token: T(5, 61), Attempt: "a", Body: []byte("y2")}))
	h, err := s.History(ctx, "f/old")
	if err != nil {
		t.Fatal(err)
	}
	if err := fencemodel.CheckHistory(h); err != nil {
		t.Errorf("history of a key under the floor does not replay: %v", err)
	}
}

// testKeptVersions checks that only real changes make versions, and that
// a reader asking for one no longer kept is told which are.
func testKeptVersions(t *testing.T, open retentionOpener) {
	s, _, _ := open(t, 3)
	ctx := context.Background()
	const key = "v/report.csv"
	for i := uint64(1); i <= 5; i++ {
		mustPublish(t, s, key, T(1, i), fmt.Sprintf("body %d", i))
	}
	// A retried publish and a conflict make no version.
	expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, 5), Attempt: "a", Body: []byte("body 5")}))
	expect(t, fencedstore.Conflict)(s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, 6), Attempt: "a", Body: []byte("no"), ExpectedVersion: ver(1)}))
	for v := uint64(3); v <= 5; v++ {
		obj, err := fencedstore.GetVersion(ctx, s, key, v)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if got, want := string(obj.Body), fmt.Sprintf("body %d", v); got != want || obj.Version != v || obj.Token != T(1, v) || obj.Hash != fencedstore.Hash([]byte(want)) {
			t.Errorf("version %d = %q v%d token %s, want %q v%d token 1.%d", v, got, obj.Version, obj.Token, want, v, v)
		}
	}
	for _, v := range []uint64{1, 2, 6} {
		// Over HTTP the VersionError arrives as its message.
		_, err := fencedstore.GetVersion(ctx, s, key, v)
		var ve *fencedstore.VersionError
		if !errors.Is(err, fencedstore.ErrNotFound) || !strings.Contains(err.Error(), "versions 3, 4, 5") || (errors.As(err, &ve) && !slices.Equal(ve.Kept, []uint64{3, 4, 5})) {
			t.Errorf("version %d: err = %v; want not found, saying versions 3, 4, 5 are kept", v, err)
		}
	}
	if _, err := fencedstore.GetVersion(ctx, s, "v/none", 1); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Errorf("version of a missing key: err = %v", err)
	}
}

// testListPage checks that paging neither skips nor repeats a key, so a
// client walking a large store sees each once.
func testListPage(t *testing.T, open retentionOpener) {
	s, _, _ := open(t, 1)
	ctx := context.Background()
	for i := 1; i <= 7; i++ {
		mustPublish(t, s, fmt.Sprintf("p/%d", i), T(1, uint64(i)), "x")
	}
	mustPublish(t, s, "q/1", T(1, 9), "x")
	var got []string
	after := ""
	for i := 0; i < 10; i++ {
		page, err := fencedstore.ListPage(ctx, s, "p/", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Keys) > 3 {
			t.Fatalf("page of %d keys, limit 3", len(page.Keys))
		}
		for _, m := range page.Keys {
			got = append(got, m.Key)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if want := []string{"p/1", "p/2", "p/3", "p/4", "p/5", "p/6", "p/7"}; !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}
	all, err := fencedstore.ListPage(ctx, s, "", "p/6", 10)
	if err != nil || len(all.Keys) != 2 || all.Keys[0].Key != "p/7" || all.Keys[1].Key != "q/1" || all.Next != "" {
		t.Errorf("the whole store after p/6: %+v, %v; want p/7 and q/1, no next", all, err)
	}
}

// sweepAll sweeps rule in batches of limit until it says there is no more
// (at most 100 batches) and returns everything it deleted.
func sweepAll(t *testing.T, s fencedstore.Sweeper, rule fencedstore.RetentionRule, now time.Time, limit int) fencedstore.Sweep {
	t.Helper()
	var all fencedstore.Sweep
	for range 100 {
		sw, err := s.SweepRule(context.Background(), rule, now, limit)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(sw.ByAge) + len(sw.ByCount); n > limit {
			t.Fatalf("one sweep step deleted %d keys, limit %d", n, limit)
		}
		all.ByAge = append(all.ByAge, sw.ByAge...)
		all.ByCount = append(all.ByCount, sw.ByCount...)
		if !sw.More {
			return all
		}
	}
	t.Fatal("sweep never finished")
	return all
}

func mustPublish(t *testing.T, s fencedstore.Store, key string, tok fencedstore.Token, body string) {
	t.Helper()
	expect(t, fencedstore.Applied)(s.Publish(context.Background(), fencedstore.PublishRequest{Key: key, Token: tok, Attempt: "a", Body: []byte(body)}))
}

// checkKeys checks the listing under prefix is exactly keys.
func checkKeys(t *testing.T, s fencedstore.Store, prefix string, keys ...string) {
	t.Helper()
	ms, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Key)
	}
	if !slices.Equal(got, keys) {
		t.Errorf("keys under %q = %v, want %v", prefix, got, keys)
	}
}

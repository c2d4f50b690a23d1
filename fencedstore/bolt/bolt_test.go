package bolt_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

func newStore(t *testing.T) fencedstore.Store {
	return newStoreWith(t, storetest.Options{MaxBodyBytes: fencedstore.DefaultMaxBodyBytes, HistoryRetention: fencedstore.DefaultHistoryRetention})
}

func newStoreWith(t *testing.T, o storetest.Options) fencedstore.Store {
	s := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	s.MaxBodyBytes, s.HistoryRetention = o.MaxBodyBytes, o.HistoryRetention
	if o.Now != nil {
		s.Now = o.Now
	}
	if o.KeepVersions > 0 {
		s.KeepVersions = o.KeepVersions
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore_Conformance(t *testing.T) {
	storetest.Run(t, newStore)
	storetest.RunLimits(t, newStoreWith)
	storetest.RunRetention(t, newStoreWith)
	storetest.RunQuota(t, newStore)
}

func newBenchStore(b *testing.B) *bolt.Store {
	s := bolt.New(filepath.Join(b.TempDir(), "store.db"))
	if err := s.Open(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkPublish1KiB(b *testing.B) {
	b.Run("sequential", func(b *testing.B) { storetest.BenchPublish(b, newBenchStore(b), false, 0) })
	b.Run("parallel", func(b *testing.B) { storetest.BenchPublish(b, newBenchStore(b), true, 32) })
}

func BenchmarkPublishStale(b *testing.B) {
	b.Run("sequential", func(b *testing.B) { storetest.BenchStale(b, newBenchStore(b), false, 0) })
	b.Run("parallel", func(b *testing.B) { storetest.BenchStale(b, newBenchStore(b), true, 32) })
}

// Close stops the committer: no goroutine outlives the store.
func TestStore_CloseLeavesNoGoroutines(t *testing.T) {
	s := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(context.Background(), fencedstore.PublishRequest{Key: "k", Token: storetest.T(1, 1), Attempt: "a", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t)
	if _, err := s.Publish(context.Background(), fencedstore.PublishRequest{Key: "k", Token: storetest.T(1, 2), Attempt: "a", Body: []byte("y")}); !errors.Is(err, fencedstore.ErrClosed) {
		t.Errorf("publish after close: err = %v, want ErrClosed", err)
	}
}

// A file written before retention (no touched index, no tombstones, no
// versions; records without their touched time) opens, is indexed once by
// each key's update time, and retention works on it.
func TestStore_OpensFileFromBeforeRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := storetest.NewClock(t0)
	s := bolt.New(path)
	s.Now = clock.Now
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, key := range []string{"r/old", "r/new"} {
		clock.Set(t0.Add(time.Duration(i) * 48 * time.Hour))
		if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: storetest.T(1, uint64(i+1)), Attempt: "a", Body: []byte(key)}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	// Make it the old format.
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, b := range []string{"versions", "touched", "tombstones", "tombtime", "floors"} {
			if err := tx.DeleteBucket([]byte(b)); err != nil {
				return err
			}
		}
		meta := tx.Bucket([]byte("meta"))
		return meta.ForEach(func(k, v []byte) error {
			var rec map[string]any
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			delete(rec, "touched")
			b, _ := json.Marshal(rec)
			return meta.Put(k, b)
		})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s = bolt.New(path)
	s.Now = clock.Now
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sw, err := s.SweepRule(ctx, fencedstore.RetentionRule{Prefix: "r/", MaxAge: 24 * time.Hour}, t0.Add(60*time.Hour), 10)
	if err != nil || len(sw.ByAge) != 1 || sw.ByAge[0] != "r/old" {
		t.Fatalf("sweep of the old file = %+v, %v; want r/old deleted by its update time", sw, err)
	}
	if obj, err := s.Get(ctx, "r/new"); err != nil || string(obj.Body) != "r/new" {
		t.Errorf("r/new after the sweep: %q, %v", obj.Body, err)
	}
	if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "r/old", Token: storetest.T(1, 1), Attempt: "b", Body: []byte("x")}); !errors.Is(err, fencedstore.ErrStaleOwner) {
		t.Errorf("the deleted key's token after the migration: %v, want stale_owner", err)
	}
}

func BenchmarkSweep20k(b *testing.B) {
	storetest.BenchSweep(b, func() fencedstore.Store { return newBenchStore(b) }, 20_000)
}

func BenchmarkListPage100k(b *testing.B) { storetest.BenchListPage(b, newBenchStore(b), 100_000) }

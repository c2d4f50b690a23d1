package bolt_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

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

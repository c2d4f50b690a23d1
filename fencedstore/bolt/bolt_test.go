package bolt_test

import (
	"path/filepath"
	"testing"

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
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore_Conformance(t *testing.T) {
	storetest.Run(t, newStore)
	storetest.RunLimits(t, newStoreWith)
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

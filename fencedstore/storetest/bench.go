package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// BenchBodySize is the body the publish benchmarks write.
const BenchBodySize = 1024

// BenchPublish measures publishes of a 1 KiB body with ever newer tokens.
// With parallel false one writer publishes to one key; with parallel true
// writers*GOMAXPROCS goroutines publish, each to its own key, so calls that
// arrive together can share a commit. It reports publishes/s.
func BenchPublish(b *testing.B, s fencedstore.Store, parallel bool, writers int) {
	ctx := context.Background()
	body := make([]byte, BenchBodySize)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	b.SetBytes(BenchBodySize)
	b.ReportAllocs()
	if !parallel {
		var seq uint64
		for b.Loop() {
			seq++
			if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "bench/seq", Token: T(1, seq), Attempt: "bench", Body: body}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "publishes/s")
		return
	}
	var next atomic.Int64
	b.SetParallelism(writers)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench/par-%d", next.Add(1))
		var seq uint64
		for pb.Next() {
			seq++
			if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, seq), Attempt: "bench", Body: body}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "publishes/s")
}

// BenchStale measures the refusal path: a key established with a new
// token, and publishes with older ones, each refused as stale_owner (and
// recorded in the key's history).
func BenchStale(b *testing.B, s fencedstore.Store, parallel bool, writers int) {
	ctx := context.Background()
	body := make([]byte, BenchBodySize)
	const key = "bench/stale"
	if _, err := s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: T(1000, 1), Attempt: "new-owner"}); err != nil {
		b.Fatal(err)
	}
	refuse := func(seq uint64) error {
		_, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, seq), Attempt: "old-owner", Body: body})
		if err != fencedstore.ErrStaleOwner {
			return fmt.Errorf("stale publish: err = %v, want ErrStaleOwner", err)
		}
		return nil
	}
	b.ReportAllocs()
	if !parallel {
		var seq uint64
		for b.Loop() {
			seq++
			if err := refuse(seq); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "refusals/s")
		return
	}
	b.SetParallelism(writers)
	b.ResetTimer()
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := refuse(seq.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "refusals/s")
}

// BenchFill publishes n keys "bench/k0000000" on with 1 KiB bodies from
// 64 writers at once (so the calls can share commits).
func BenchFill(b *testing.B, s fencedstore.Store, n int) {
	b.Helper()
	ctx := context.Background()
	body := make([]byte, BenchBodySize)
	var next atomic.Int64
	errs := make(chan error, 64)
	for range 64 {
		go func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					errs <- nil
					return
				}
				_, err := s.Publish(ctx, fencedstore.PublishRequest{Key: fmt.Sprintf("bench/k%07d", i), Token: T(1, uint64(i)), Attempt: "bench", Body: body})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 64 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchSweep measures retention: each iteration fills a fresh store from
// newStore with keys keys (not timed), then sweeps them all down to 100
// with a max_keys rule in batches of fencedstore.DefaultSweepBatch. It
// reports deleted keys/s.
func BenchSweep(b *testing.B, newStore func() fencedstore.Store, keys int) {
	rule := fencedstore.RetentionRule{Prefix: "bench/", MaxKeys: 100}
	deleted := 0
	var took float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := newStore()
		BenchFill(b, s, keys)
		sw := s.(fencedstore.Sweeper)
		b.StartTimer()
		start := time.Now()
		for range keys/fencedstore.DefaultSweepBatch + 2 {
			res, err := sw.SweepRule(context.Background(), rule, time.Now(), fencedstore.DefaultSweepBatch)
			if err != nil {
				b.Fatal(err)
			}
			deleted += len(res.ByCount)
			if !res.More {
				break
			}
		}
		took += time.Since(start).Seconds()
	}
	if deleted != b.N*(keys-100) {
		b.Fatalf("deleted %d keys, want %d", deleted, b.N*(keys-100))
	}
	b.ReportMetric(float64(deleted)/took, "keys/s")
}

// BenchListPage measures one page of 100 keys from the middle of a store
// of keys keys (the Store page's read).
func BenchListPage(b *testing.B, s fencedstore.Store, keys int) {
	BenchFill(b, s, keys)
	after := fmt.Sprintf("bench/k%07d", keys/2)
	b.ResetTimer()
	for b.Loop() {
		page, err := fencedstore.ListPage(context.Background(), s, "bench/", after, 100)
		if err != nil || len(page.Keys) != 100 {
			b.Fatalf("page of %d keys, %v", len(page.Keys), err)
		}
	}
}

package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

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

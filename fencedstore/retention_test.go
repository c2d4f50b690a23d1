package fencedstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// fakeSweeper records the calls and answers from its functions.
type fakeSweeper struct {
	mu      sync.Mutex
	sweeps  []string
	cutoffs []time.Time
	sweep   func(rule fencedstore.RetentionRule, n int) (fencedstore.Sweep, error)
	drop    func(n int) (int, bool, error)
}

func (f *fakeSweeper) SweepRule(_ context.Context, rule fencedstore.RetentionRule, _ time.Time, limit int) (fencedstore.Sweep, error) {
	f.mu.Lock()
	f.sweeps = append(f.sweeps, rule.Prefix)
	n := len(f.sweeps)
	f.mu.Unlock()
	return f.sweep(rule, n)
}

func (f *fakeSweeper) DropTombstones(_ context.Context, cutoff time.Time, limit int) (int, bool, error) {
	f.mu.Lock()
	f.cutoffs = append(f.cutoffs, cutoff)
	n := len(f.cutoffs)
	f.mu.Unlock()
	return f.drop(n)
}

// One round sweeps each rule until it has no more (at most MaxBatches
// batches), goes on after a rule fails, counts what was deleted, and
// drops the tombstones older than TombstoneTTL by the retainer's clock.
func TestRetainer_Round(t *testing.T) {
	now := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	f := &fakeSweeper{
		sweep: func(rule fencedstore.RetentionRule, n int) (fencedstore.Sweep, error) {
			switch rule.Prefix {
			case "a/": // two full batches, then done
				return fencedstore.Sweep{ByAge: []string{"a/x"}, More: n < 2}, nil
			case "b/": // fails
				return fencedstore.Sweep{}, boom
			}
			return fencedstore.Sweep{ByCount: []string{"c/x"}, More: true}, nil // never done
		},
		drop: func(n int) (int, bool, error) { return 5, n < 3, nil },
	}
	var deleted, dropped int
	r := &fencedstore.Retainer{
		Store: f, TombstoneTTL: time.Hour, Batch: 10, MaxBatches: 4, Now: func() time.Time { return now },
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Rules:    []fencedstore.RetentionRule{{Prefix: "a/", MaxAge: time.Hour}, {Prefix: "b/", MaxKeys: 1}, {Prefix: "c/", MaxKeys: 1}},
		OnDelete: func(rule fencedstore.RetentionRule, byAge, byCount int) { deleted += byAge + byCount },
		OnDrop:   func(n int) { dropped += n },
	}
	if err := r.Round(context.Background()); !errors.Is(err, boom) {
		t.Errorf("Round = %v, want the failure of rule b/", err)
	}
	if got, want := strings.Join(f.sweeps, " "), "a/ a/ b/ c/ c/ c/ c/"; got != want {
		t.Errorf("sweeps = %s, want %s (c/ stops at MaxBatches)", got, want)
	}
	if deleted != 6 || dropped != 15 {
		t.Errorf("counted %d deleted, %d dropped; want 6 and 15", deleted, dropped)
	}
	for _, c := range f.cutoffs {
		if !c.Equal(now.Add(-time.Hour)) {
			t.Errorf("tombstone cutoff %v, want now - TombstoneTTL", c)
		}
	}
}

// Start refuses a bad rule; SweepNow runs a round on the loop; Close
// stops it.
func TestRetainer_StartSweepNowClose(t *testing.T) {
	bad := &fencedstore.Retainer{Store: &fakeSweeper{}, Rules: []fencedstore.RetentionRule{{Prefix: "", MaxAge: time.Hour}}}
	if err := bad.Start(); err == nil || !strings.Contains(err.Error(), "store.retention[0]: prefix is required") {
		t.Errorf("Start with an empty prefix = %v", err)
	}
	f := &fakeSweeper{
		sweep: func(fencedstore.RetentionRule, int) (fencedstore.Sweep, error) { return fencedstore.Sweep{}, nil },
		drop:  func(int) (int, bool, error) { return 0, false, nil },
	}
	r := &fencedstore.Retainer{Store: f, Rules: []fencedstore.RetentionRule{{Prefix: "a/", MaxKeys: 1}}, Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	r.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sweeps) != 2 { // the round at start, then SweepNow's
		t.Errorf("%d sweeps, want 2", len(f.sweeps))
	}
	if err := r.SweepNow(ctx); !errors.Is(err, fencedstore.ErrClosed) {
		t.Errorf("SweepNow after Close = %v, want ErrClosed", err)
	}
}

// A cursor names its prefix: it is refused with another, and garbage is
// refused.
func TestCursor(t *testing.T) {
	c := fencedstore.EncodeCursor("reports/", "reports/2026-07.csv")
	if after, err := fencedstore.DecodeCursor("reports/", c); err != nil || after != "reports/2026-07.csv" {
		t.Errorf("DecodeCursor = %q, %v", after, err)
	}
	for _, bad := range []struct{ prefix, cursor string }{{"logs/", c}, {"reports/", "k1.!!"}, {"reports/", "x" + c}} {
		if _, err := fencedstore.DecodeCursor(bad.prefix, bad.cursor); !errors.Is(err, fencedstore.ErrInvalidKey) {
			t.Errorf("DecodeCursor(%q, %q) = %v, want ErrInvalidKey", bad.prefix, bad.cursor, err)
		}
	}
}

// The tombstone rule as pure functions: a token not newer than the
// tombstone's is stale (equal too), a newer one recreates the key from
// version 0; an expired call is refused as expired first.
func TestDecide_Tombstone(t *testing.T) {
	now := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	g := fencedstore.Token{Epoch: 3, Seq: 7}
	live := fencedstore.Meta{Key: "r/a", Version: 4, Greatest: g, Token: g, Attempt: "w", Hash: "h", Size: 9, Updated: now}
	tomb, d := fencedstore.DecideDelete(live, now)
	if tomb.Deleted != now || tomb.Version != 0 || tomb.Greatest != g || tomb.Hash != "" || d.Outcome != fencedstore.Deleted || d.Greatest != g {
		t.Fatalf("DecideDelete = %+v, %+v", tomb, d)
	}
	for _, tc := range []struct {
		tok     fencedstore.Token
		expires time.Time
		want    fencedstore.Outcome
	}{
		{fencedstore.Token{Epoch: 3, Seq: 6}, time.Time{}, fencedstore.StaleOwner},
		{g, time.Time{}, fencedstore.StaleOwner},
		{fencedstore.Token{Epoch: 3, Seq: 8}, now.Add(-time.Second), fencedstore.Expired},
		{fencedstore.Token{Epoch: 3, Seq: 8}, time.Time{}, fencedstore.Applied},
	} {
		m, d := fencedstore.DecidePublish(tomb, fencedstore.Token{}, fencedstore.PublishRequest{Key: "r/a", Token: tc.tok, Attempt: "x", Expires: tc.expires}, "h2", now)
		if d.Outcome != tc.want {
			t.Errorf("publish %s on the tombstone: %s, want %s", tc.tok, d.Outcome, tc.want)
		}
		if tc.want == fencedstore.Applied && (m.Version != 1 || !m.Deleted.IsZero() || m.Greatest != tc.tok) {
			t.Errorf("recreated: %+v, want version 1, live, greatest %s", m, tc.tok)
		}
		if tc.want != fencedstore.Applied && m != tomb {
			t.Errorf("a refusal changed the tombstone: %+v", m)
		}
		_, d = fencedstore.DecideEstablish(tomb, fencedstore.Token{}, fencedstore.EstablishRequest{Key: "r/a", Token: tc.tok, Attempt: "x", Expires: tc.expires}, now)
		if want := map[fencedstore.Outcome]fencedstore.Outcome{fencedstore.Applied: fencedstore.Established}[tc.want]; want != "" && d.Outcome != want || want == "" && d.Outcome != tc.want {
			t.Errorf("establish %s on the tombstone: %s", tc.tok, d.Outcome)
		}
	}
}

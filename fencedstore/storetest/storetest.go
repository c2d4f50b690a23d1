// Package storetest is the conformance suite every fencedstore.Store
// backend must pass: the rules table, history, and bad input.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
)

// Factory returns a new, empty store; the suite does not close it.
type Factory func(t *testing.T) fencedstore.Store

// Options are the limits a store is made with for RunLimits.
type Options struct {
	MaxBodyBytes     int64
	HistoryRetention int
}

// OptionsFactory returns a new, empty store with the given limits.
type OptionsFactory func(t *testing.T, o Options) fencedstore.Store

// T is shorthand for a token.
func T(epoch, seq uint64) fencedstore.Token { return fencedstore.Token{Epoch: epoch, Seq: seq} }

func ver(v uint64) *uint64 { return &v }

// step is one call in a rules-table scenario and what it must answer.
type step struct {
	establish bool
	tok       fencedstore.Token
	attempt   string
	body      string
	expected  *uint64

	want        fencedstore.Outcome
	wantVersion uint64
	wantBody    string // the key's body after the step ("" means no body)
}

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	t.Run("RulesTable", func(t *testing.T) { testRulesTable(t, newStore) })
	t.Run("History", func(t *testing.T) { testHistory(t, newStore) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, newStore) })
	t.Run("ListAndGet", func(t *testing.T) { testListAndGet(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newStore) })
}

// RunLimits checks the configurable limits: the body cap and the history
// retention.
func RunLimits(t *testing.T, newStore OptionsFactory) {
	t.Run("BodyCap", func(t *testing.T) {
		s := newStore(t, Options{MaxBodyBytes: 1024, HistoryRetention: fencedstore.DefaultHistoryRetention})
		ctx := context.Background()
		const key = "reports/big.bin"
		_, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, 1), Attempt: "a", Body: make([]byte, 1025)})
		if !errors.Is(err, fencedstore.ErrTooLarge) {
			t.Fatalf("publish of 1025 bytes with a 1024-byte cap: err = %v, want ErrTooLarge", err)
		}
		if _, err := s.History(ctx, key); !errors.Is(err, fencedstore.ErrNotFound) {
			t.Errorf("a refused oversized body left history: err = %v", err)
		}
		expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, 1), Attempt: "a", Body: make([]byte, 1024)}))
	})
	t.Run("HistoryRetention", func(t *testing.T) {
		const keep = 5
		s := newStore(t, Options{MaxBodyBytes: fencedstore.DefaultMaxBodyBytes, HistoryRetention: keep})
		ctx := context.Background()
		const key = "reports/busy.csv"
		for i := uint64(1); i <= 12; i++ {
			expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, i), Attempt: "a", Body: []byte{byte(i)}}))
		}
		h, err := s.History(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != keep {
			t.Fatalf("history has %d entries, want the last %d", len(h), keep)
		}
		for i, d := range h {
			if got, want := d.Token, T(1, uint64(12-keep+1+i)); got != want {
				t.Errorf("history[%d].Token = %s, want %s", i, got, want)
			}
		}
	})
}

// testConcurrent drives the store with many clients and random tokens on a
// few keys and checks the results three ways: the fencing invariant
// directly, linearizability against the fenced-register model (porcupine),
// and a replay of each key's recorded history through the rules.
func testConcurrent(t *testing.T, newStore Factory) {
	s := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := []string{"reports/a.csv", "reports/b.csv", "logs/c.txt"}
	var rec fencemodel.Recorder
	w := fencemodel.Workload{Keys: keys, Clients: 16, Calls: 60, Seed: uint64(time.Now().UnixNano())}
	cnt := w.Run(ctx, s, &rec)
	t.Logf("seed %d: %s", w.Seed, cnt)
	if cnt.Unknown > 0 {
		t.Fatalf("%d calls failed; first: %v", cnt.Unknown, cnt.FirstError)
	}
	if ctx.Err() != nil {
		t.Fatal("workload did not finish in time")
	}
	if cnt.Applied == 0 || cnt.StaleOwner == 0 || cnt.Established == 0 {
		t.Errorf("the workload did not reach applied, stale_owner and established: %s", cnt)
	}

	metas, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	final := map[string]fencedstore.Token{}
	for _, m := range metas {
		final[m.Key] = m.Greatest
	}
	ops := rec.Operations()
	for _, err := range fencemodel.CheckFencing(ops, final) {
		t.Error(err)
	}
	res, info := fencemodel.Check(ops, 30*time.Second)
	if res != porcupine.Ok {
		t.Errorf("history of %d calls is %s under the fenced-register model", len(ops), res)
		if f, err := os.CreateTemp("", "fencecron-porcupine-*.html"); err == nil {
			porcupine.Visualize(fencemodel.Model, info, f)
			f.Close()
			t.Logf("visualization: %s", f.Name())
		}
	}
	for _, k := range keys {
		h, err := s.History(ctx, k)
		if err != nil {
			t.Fatalf("history %s: %v", k, err)
		}
		if err := fencemodel.CheckHistory(h); err != nil {
			t.Errorf("history %s: %v", k, err)
		}
	}
}

func testRulesTable(t *testing.T, newStore Factory) {
	est := func(tok fencedstore.Token, want fencedstore.Outcome, v uint64, body string) step {
		return step{establish: true, tok: tok, attempt: "a" + tok.String(), want: want, wantVersion: v, wantBody: body}
	}
	pub := func(tok fencedstore.Token, attempt, body string, expected *uint64, want fencedstore.Outcome, v uint64, after string) step {
		return step{tok: tok, attempt: attempt, body: body, expected: expected, want: want, wantVersion: v, wantBody: after}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"establish on a new key", []step{
			est(T(1, 5), fencedstore.Established, 0, ""),
		}},
		{"establish older is stale and changes nothing", []step{
			est(T(2, 9), fencedstore.Established, 0, ""),
			est(T(1, 50), fencedstore.StaleOwner, 0, ""),
			pub(T(2, 9), "w2", "new", nil, fencedstore.Applied, 1, "new"),
		}},
		{"establish equal is accepted", []step{
			est(T(1, 5), fencedstore.Established, 0, ""),
			est(T(1, 5), fencedstore.Established, 0, ""),
		}},
		{"establish newer shuts out the current writer", []step{
			pub(T(1, 5), "w1", "old", nil, fencedstore.Applied, 1, "old"),
			est(T(1, 7), fencedstore.Established, 1, "old"),
			pub(T(1, 5), "w1", "late", nil, fencedstore.StaleOwner, 1, "old"),
		}},
		{"publish older is stale and changes nothing", []step{
			pub(T(3, 10), "w2", "new", nil, fencedstore.Applied, 1, "new"),
			pub(T(2, 99), "w1", "stale", nil, fencedstore.StaleOwner, 1, "new"),
			pub(T(2, 99), "w1", "stale", ver(1), fencedstore.StaleOwner, 1, "new"),
		}},
		{"publish newer applies", []step{
			pub(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			pub(T(1, 2), "w2", "two", nil, fencedstore.Applied, 2, "two"),
			pub(T(2, 1), "w3", "three", ver(2), fencedstore.Applied, 3, "three"),
		}},
		{"publish newer with a wrong expected version conflicts but still fences", []step{
			pub(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			pub(T(1, 2), "w2", "two", ver(7), fencedstore.Conflict, 1, "one"),
			pub(T(1, 1), "w1", "late", nil, fencedstore.StaleOwner, 1, "one"),
		}},
		{"expected version 0 means the key must be new", []step{
			pub(T(1, 1), "w1", "one", ver(0), fencedstore.Applied, 1, "one"),
			pub(T(1, 2), "w2", "two", ver(0), fencedstore.Conflict, 1, "one"),
		}},
		{"equal token, same attempt and body is an idempotent retry", []step{
			pub(T(1, 1), "w1", "one", ver(0), fencedstore.Applied, 1, "one"),
			pub(T(1, 1), "w1", "one", ver(0), fencedstore.Applied, 1, "one"),
			pub(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
		}},
		{"equal token, new body applies", []step{
			pub(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			pub(T(1, 1), "w1", "two", ver(1), fencedstore.Applied, 2, "two"),
		}},
		{"equal token, wrong expected version conflicts", []step{
			pub(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			pub(T(1, 1), "w1", "two", ver(5), fencedstore.Conflict, 1, "one"),
		}},
		{"publish after establish of the same token", []step{
			est(T(4, 4), fencedstore.Established, 0, ""),
			pub(T(4, 4), "a4.4", "r", ver(0), fencedstore.Applied, 1, "r"),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			ctx := context.Background()
			const key = "reports/2026-07.csv"
			greatest := fencedstore.Token{}
			for i, st := range tc.steps {
				before := snapshot(t, s, key)
				var res fencedstore.Result
				var err error
				if st.establish {
					res, err = s.Establish(ctx, key, st.tok, st.attempt)
				} else {
					res, err = s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: st.tok, Attempt: st.attempt, Body: []byte(st.body), ExpectedVersion: st.expected})
				}
				wantErr := fencedstore.Decision{Outcome: st.want}.Err()
				if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
					t.Fatalf("step %d: err = %v, want %v", i, err, wantErr)
				}
				if st.want != fencedstore.StaleOwner && greatest.Less(st.tok) {
					greatest = st.tok
				}
				if got, want := res.Outcome, st.want; got != want {
					t.Fatalf("step %d: outcome = %s, want %s", i, got, want)
				}
				if got, want := res.Version, st.wantVersion; got != want {
					t.Errorf("step %d: version = %d, want %d", i, got, want)
				}
				if got, want := res.Greatest, greatest; got != want {
					t.Errorf("step %d: greatest = %s, want %s", i, got, want)
				}
				after := snapshot(t, s, key)
				if got, want := after.body, st.wantBody; got != want {
					t.Errorf("step %d: body = %q, want %q", i, got, want)
				}
				if st.want == fencedstore.StaleOwner && after != before {
					t.Errorf("step %d: a stale call changed the key: before %+v, after %+v", i, before, after)
				}
			}
		})
	}
}

// keyState is what a refusal must leave untouched.
type keyState struct {
	body     string
	version  uint64
	greatest fencedstore.Token
}

func snapshot(t *testing.T, s fencedstore.Store, key string) keyState {
	t.Helper()
	ctx := context.Background()
	var ks keyState
	metas, err := s.List(ctx, key)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, m := range metas {
		if m.Key == key {
			ks.version, ks.greatest = m.Version, m.Greatest
		}
	}
	obj, err := s.Get(ctx, key)
	switch {
	case errors.Is(err, fencedstore.ErrNotFound):
	case err != nil:
		t.Fatalf("get: %v", err)
	default:
		ks.body = string(obj.Body)
	}
	return ks
}

func testHistory(t *testing.T, newStore Factory) {
	s := newStore(t)
	ctx := context.Background()
	const key = "reports/handoff.csv"
	// The report handoff: W1 establishes, W2 takes over and publishes, W1
	// wakes up and tries to publish.
	expect(t, fencedstore.Established)(s.Establish(ctx, key, T(1, 10), "w1"))
	expect(t, fencedstore.Established)(s.Establish(ctx, key, T(2, 14), "w2"))
	expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(2, 14), Attempt: "w2", Body: []byte("fresh")}))
	expect(t, fencedstore.StaleOwner)(s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, 10), Attempt: "w1", Body: []byte("stale")}))

	h, err := s.History(ctx, key)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	want := []fencedstore.Decision{
		{Outcome: fencedstore.Established, Token: T(1, 10), Attempt: "w1", Version: 0},
		{Outcome: fencedstore.Established, Token: T(2, 14), Attempt: "w2", Version: 0, Greatest: T(1, 10)},
		{Outcome: fencedstore.Applied, Token: T(2, 14), Attempt: "w2", Version: 1, Greatest: T(2, 14)},
		{Outcome: fencedstore.StaleOwner, Token: T(1, 10), Attempt: "w1", Version: 1, Greatest: T(2, 14)},
	}
	if len(h) != len(want) {
		t.Fatalf("history has %d entries, want %d: %+v", len(h), len(want), h)
	}
	for i := range want {
		g, w := h[i], want[i]
		if g.Outcome != w.Outcome || g.Token != w.Token || g.Attempt != w.Attempt || g.Version != w.Version || g.Greatest != w.Greatest {
			t.Errorf("history[%d] = %+v, want %+v", i, g, w)
		}
		if g.Time.IsZero() {
			t.Errorf("history[%d] has no time", i)
		}
	}
	if _, err := s.History(ctx, "reports/never"); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Errorf("history of an unknown key: err = %v, want ErrNotFound", err)
	}
}

func testBadInput(t *testing.T, newStore Factory) {
	s := newStore(t)
	ctx := context.Background()
	keys := []string{"", "/abs", "a/../b", "..", "a//b", "a/./b", strings.Repeat("k", fencedstore.MaxKeyLen+1), "bad\x00nul"}
	for _, k := range keys {
		if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: k, Token: T(1, 1), Attempt: "a", Body: []byte("x")}); !errors.Is(err, fencedstore.ErrInvalidKey) {
			t.Errorf("publish %q: err = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Establish(ctx, k, T(1, 1), "a"); !errors.Is(err, fencedstore.ErrInvalidKey) {
			t.Errorf("establish %q: err = %v, want ErrInvalidKey", k, err)
		}
	}
	if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "ok", Token: fencedstore.Token{}, Attempt: "a", Body: []byte("x")}); !errors.Is(err, fencedstore.ErrBadToken) {
		t.Errorf("publish with the zero token: err = %v, want ErrBadToken", err)
	}
	metas, err := s.List(ctx, "")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(metas) != 0 {
		t.Errorf("bad input wrote keys: %+v", metas)
	}
}

func testListAndGet(t *testing.T, newStore Factory) {
	s := newStore(t)
	ctx := context.Background()
	for i, k := range []string{"reports/b.csv", "reports/a.csv", "logs/x"} {
		expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: k, Token: T(1, uint64(i+1)), Attempt: "a", Body: []byte(k)}))
	}
	metas, err := s.List(ctx, "reports/")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(metas) != 2 || metas[0].Key != "reports/a.csv" || metas[1].Key != "reports/b.csv" {
		t.Fatalf("list reports/ = %+v, want a.csv then b.csv", metas)
	}
	if got, want := metas[0].Greatest, T(1, 2); got != want {
		t.Errorf("greatest of a.csv = %s, want %s", got, want)
	}
	obj, err := s.Get(ctx, "reports/a.csv")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !bytes.Equal(obj.Body, []byte("reports/a.csv")) || obj.Version != 1 || obj.Hash != fencedstore.Hash(obj.Body) {
		t.Errorf("get = %+v body %q", obj.Meta, obj.Body)
	}
	if _, err := s.Get(ctx, "reports/none.csv"); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Errorf("get missing: err = %v, want ErrNotFound", err)
	}
}

func expect(t *testing.T, want fencedstore.Outcome) func(fencedstore.Result, error) {
	t.Helper()
	return func(res fencedstore.Result, err error) {
		t.Helper()
		if res.Outcome != want {
			t.Fatalf("outcome = %s (err %v), want %s", res.Outcome, err, want)
		}
	}
}

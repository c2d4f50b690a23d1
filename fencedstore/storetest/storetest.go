// Package storetest is the conformance suite every fencedstore.Store
// backend must pass: the rules table, history, and bad input.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
)

// Factory returns a new, empty store; the suite does not close it.
type Factory func(t *testing.T) fencedstore.Store

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

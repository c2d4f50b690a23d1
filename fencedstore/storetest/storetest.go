// Package storetest is the conformance suite every fencedstore.Store
// backend must pass: the rules table (expiry included), history, the range
// of tokens, bad input, and jobs' floors.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"slices"
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
	// Now, if set, is the store's clock (the clock it decides expiries
	// by and stamps decisions with).
	Now func() time.Time
	// KeepVersions, if set, is how many bodies a key keeps.
	KeepVersions int
}

// OptionsFactory returns a new, empty store with the given limits.
type OptionsFactory func(t *testing.T, o Options) fencedstore.Store

// T is shorthand for a token.
func T(epoch, seq uint64) fencedstore.Token { return fencedstore.Token{Epoch: epoch, Seq: seq} }

func ver(v uint64) *uint64 { return &v }

// Expiries for the rules table, whatever the store's clock says: one long
// past, one far ahead. Whole seconds, as a signed token carries them.
var (
	longAgo  = time.Unix(1_000_000_000, 0).UTC() // 2001
	farAhead = time.Unix(4_102_444_800, 0).UTC() // 2100
)

// step is one call in a rules-table scenario and what it must answer.
type step struct {
	establish bool
	tok       fencedstore.Token
	attempt   string
	body      string
	expected  *uint64
	expires   time.Time

	want        fencedstore.Outcome
	wantVersion uint64
	wantBody    string // the key's body after the step ("" means no body)
}

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	t.Run("RulesTable", func(t *testing.T) { testRulesTable(t, newStore) })
	t.Run("History", func(t *testing.T) { testHistory(t, newStore) })
	t.Run("TokenRange", func(t *testing.T) { testTokenRange(t, newStore) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, newStore) })
	t.Run("ListAndGet", func(t *testing.T) { testListAndGet(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newStore) })
	t.Run("Floors", func(t *testing.T) { testFloors(t, newStore) })
	t.Run("FloorRace", func(t *testing.T) { testFloorRace(t, newStore) })
}

// RunLimits checks the configurable limits (the body cap and the history
// retention) and, with the store's clock set, the edge of an expiry.
func RunLimits(t *testing.T, newStore OptionsFactory) {
	t.Run("ExpiryEdge", func(t *testing.T) { testExpiryEdge(t, newStore) })
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
	if cnt.Applied == 0 || cnt.StaleOwner == 0 || cnt.Established == 0 || cnt.Expired == 0 {
		t.Errorf("the workload did not reach applied, stale_owner, established and expired: %s", cnt)
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

// rulesCase is one rules-table scenario: calls on one key, in order.
type rulesCase struct {
	name  string
	steps []step
}

// testRulesTable runs every backend through the same scenarios, so that
// none drifts from the pure rule (fencedstore.DecideEstablish and
// DecidePublish).
func testRulesTable(t *testing.T, newStore Factory) {
	cases := slices.Concat(establishCases(), publishCases(), expiryCases())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			const key = "reports/2026-07.csv"
			checkRuleSteps(t, s, key, tc.steps)
			checkRuleHistory(t, s, key, tc.steps)
		})
	}
}

// estStep, like pubStep and expiring, keeps a scenario one call to a line.
func estStep(tok fencedstore.Token, want fencedstore.Outcome, v uint64, body string) step {
	return step{establish: true, tok: tok, attempt: "a" + tok.String(), want: want, wantVersion: v, wantBody: body}
}

func pubStep(tok fencedstore.Token, attempt, body string, expected *uint64, want fencedstore.Outcome, v uint64, after string) step {
	return step{tok: tok, attempt: attempt, body: body, expected: expected, want: want, wantVersion: v, wantBody: after}
}

func expiring(st step, at time.Time) step {
	st.expires = at
	return st
}

// establishCases are the scenarios an establish decides: it claims a key
// without writing it, and still shuts out older writers.
func establishCases() []rulesCase {
	return []rulesCase{
		{"establish on a new key", []step{
			estStep(T(1, 5), fencedstore.Established, 0, ""),
		}},
		{"establish older is stale and changes nothing", []step{
			estStep(T(2, 9), fencedstore.Established, 0, ""),
			estStep(T(1, 50), fencedstore.StaleOwner, 0, ""),
			pubStep(T(2, 9), "w2", "new", nil, fencedstore.Applied, 1, "new"),
		}},
		{"establish equal is accepted", []step{
			estStep(T(1, 5), fencedstore.Established, 0, ""),
			estStep(T(1, 5), fencedstore.Established, 0, ""),
		}},
		{"establish newer shuts out the current writer", []step{
			pubStep(T(1, 5), "w1", "old", nil, fencedstore.Applied, 1, "old"),
			estStep(T(1, 7), fencedstore.Established, 1, "old"),
			pubStep(T(1, 5), "w1", "late", nil, fencedstore.StaleOwner, 1, "old"),
		}},
	}
}

// publishCases are the ways a second writer meets the first: older and
// newer tokens, expected versions, retries.
func publishCases() []rulesCase {
	return []rulesCase{
		{"publish older is stale and changes nothing", []step{
			pubStep(T(3, 10), "w2", "new", nil, fencedstore.Applied, 1, "new"),
			pubStep(T(2, 99), "w1", "stale", nil, fencedstore.StaleOwner, 1, "new"),
			pubStep(T(2, 99), "w1", "stale", ver(1), fencedstore.StaleOwner, 1, "new"),
		}},
		{"publish newer applies", []step{
			pubStep(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			pubStep(T(1, 2), "w2", "two", nil, fencedstore.Applied, 2, "two"),
			pubStep(T(2, 1), "w3", "three", ver(2), fencedstore.Applied, 3, "three"),
		}},
		{"publish newer with a wrong expected version conflicts but still fences", []step{
			pubStep(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			pubStep(T(1, 2), "w2", "two", ver(7), fencedstore.Conflict, 1, "one"),
			pubStep(T(1, 1), "w1", "late", nil, fencedstore.StaleOwner, 1, "one"),
		}},
		{"expected version 0 means the key must be new", []step{
			pubStep(T(1, 1), "w1", "one", ver(0), fencedstore.Applied, 1, "one"),
			pubStep(T(1, 2), "w2", "two", ver(0), fencedstore.Conflict, 1, "one"),
		}},
		{"equal token, same attempt and body is an idempotent retry", []step{
			pubStep(T(1, 1), "w1", "one", ver(0), fencedstore.Applied, 1, "one"),
			pubStep(T(1, 1), "w1", "one", ver(0), fencedstore.Applied, 1, "one"),
			pubStep(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
		}},
		{"equal token, new body applies", []step{
			pubStep(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			pubStep(T(1, 1), "w1", "two", ver(1), fencedstore.Applied, 2, "two"),
		}},
		{"equal token, wrong expected version conflicts", []step{
			pubStep(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			pubStep(T(1, 1), "w1", "two", ver(5), fencedstore.Conflict, 1, "one"),
		}},
		{"publish after establish of the same token", []step{
			estStep(T(4, 4), fencedstore.Established, 0, ""),
			pubStep(T(4, 4), "a4.4", "r", ver(0), fencedstore.Applied, 1, "r"),
		}},
	}
}

// expiryCases check that an expired call changes nothing, whatever its
// token, and that expiry is judged before staleness.
func expiryCases() []rulesCase {
	return []rulesCase{
		{"expired establish on a new key is refused and changes nothing", []step{
			expiring(estStep(T(1, 5), fencedstore.Expired, 0, ""), longAgo),
			pubStep(T(1, 1), "w1", "one", ver(0), fencedstore.Applied, 1, "one"),
		}},
		{"expired publish with a newer token is refused and changes nothing", []step{
			pubStep(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"),
			expiring(pubStep(T(2, 1), "w2", "two", nil, fencedstore.Expired, 1, "one"), longAgo),
			expiring(estStep(T(3, 1), fencedstore.Expired, 1, "one"), longAgo),
			pubStep(T(1, 1), "w1", "three", ver(1), fencedstore.Applied, 2, "three"),
		}},
		{"expired is decided before stale", []step{
			pubStep(T(5, 5), "w5", "new", nil, fencedstore.Applied, 1, "new"),
			expiring(pubStep(T(1, 1), "w1", "old", nil, fencedstore.Expired, 1, "new"), longAgo),
		}},
		{"expired retry of an applied publish is refused", []step{
			expiring(pubStep(T(1, 1), "w1", "one", nil, fencedstore.Applied, 1, "one"), farAhead),
			expiring(pubStep(T(1, 1), "w1", "one", nil, fencedstore.Expired, 1, "one"), longAgo),
		}},
		{"an expiry still ahead is no obstacle", []step{
			expiring(estStep(T(1, 5), fencedstore.Established, 0, ""), farAhead),
			expiring(pubStep(T(1, 5), "a1.5", "r", ver(0), fencedstore.Applied, 1, "r"), farAhead),
			expiring(pubStep(T(1, 4), "a1.4", "x", nil, fencedstore.StaleOwner, 1, "r"), farAhead),
		}},
	}
}

// checkRuleSteps makes the calls in order and checks each answer, and that
// a refused call left the key as it was: a refusal has no side effects.
func checkRuleSteps(t *testing.T, s fencedstore.Store, key string, steps []step) {
	ctx := context.Background()
	greatest := fencedstore.Token{}
	for i, st := range steps {
		before := snapshot(t, s, key)
		var res fencedstore.Result
		var err error
		if st.establish {
			res, err = s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: st.tok, Attempt: st.attempt, Expires: st.expires})
		} else {
			res, err = s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: st.tok, Attempt: st.attempt, Body: []byte(st.body), ExpectedVersion: st.expected, Expires: st.expires})
		}
		wantErr := fencedstore.Decision{Outcome: st.want}.Err()
		if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
			t.Fatalf("step %d: err = %v, want %v", i, err, wantErr)
		}
		if st.want.Accepted() && greatest.Less(st.tok) {
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
		if !st.want.Accepted() && after != before {
			t.Errorf("step %d: a %s call changed the key: before %+v, after %+v", i, st.want, before, after)
		}
	}
}

// checkRuleHistory checks the key's history against the calls: it is what
// an operator audits, so refusals must be in it too.
func checkRuleHistory(t *testing.T, s fencedstore.Store, key string, steps []step) {
	ctx := context.Background()
	// Every call, refused or not, is in the key's history, with
	// the expiry it carried, and the history replays.
	h, err := s.History(ctx, key)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if len(h) != len(steps) {
		t.Fatalf("history has %d decisions, want one per call (%d): %+v", len(h), len(steps), h)
	}
	for i, d := range h {
		// A call without an expiry may still carry one the
		// transport added (the HTTP client signs every token with
		// one).
		if st := steps[i]; d.Outcome != st.want || (!st.expires.IsZero() && !d.Expires.Equal(st.expires)) {
			t.Errorf("history[%d] = %s expiring %v, want %s expiring %v", i, d.Outcome, d.Expires, steps[i].want, steps[i].expires)
		}
	}
	if err := fencemodel.CheckHistory(h); err != nil {
		t.Errorf("history does not replay: %v", err)
	}
}

// testExpiryEdge sets the store's clock and checks the edge of an expiry:
// a call at its expiry is still good, one a second after is refused as
// expired, on a key with a body and on a new one, and the refusals are
// recorded with their expiry and the decision's time.
func testExpiryEdge(t *testing.T, newStore OptionsFactory) {
	now := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	s := newStore(t, Options{MaxBodyBytes: fencedstore.DefaultMaxBodyBytes, HistoryRetention: fencedstore.DefaultHistoryRetention, Now: func() time.Time { return now }})
	ctx := context.Background()
	const key, fresh = "reports/edge.csv", "reports/never-written.csv"
	expect(t, fencedstore.Applied)(s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, 1), Attempt: "w1", Body: []byte("one"), Expires: now}))
	before := snapshot(t, s, key)
	res, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(2, 1), Attempt: "w2", Body: []byte("two"), Expires: now.Add(-time.Second)})
	if !errors.Is(err, fencedstore.ErrExpired) || res.Outcome != fencedstore.Expired || res.Version != 1 || res.Greatest != T(1, 1) {
		t.Fatalf("publish a second after its expiry: %+v, %v; want expired at version 1, greatest 1.1", res, err)
	}
	if after := snapshot(t, s, key); after != before {
		t.Errorf("an expired publish changed the key: before %+v, after %+v", before, after)
	}
	res, err = s.Establish(ctx, fencedstore.EstablishRequest{Key: fresh, Token: T(9, 9), Attempt: "w9", Expires: now.Add(-time.Second)})
	if !errors.Is(err, fencedstore.ErrExpired) || res.Outcome != fencedstore.Expired || !res.Greatest.IsZero() {
		t.Fatalf("expired establish on a new key: %+v, %v; want expired, greatest 0.0", res, err)
	}
	expect(t, fencedstore.Established)(s.Establish(ctx, fencedstore.EstablishRequest{Key: fresh, Token: T(2, 2), Attempt: "w2", Expires: now.Add(time.Second)}))

	for k, want := range map[string][]fencedstore.Outcome{key: {fencedstore.Applied, fencedstore.Expired}, fresh: {fencedstore.Expired, fencedstore.Established}} {
		h, err := s.History(ctx, k)
		if err != nil {
			t.Fatalf("history %s: %v", k, err)
		}
		if len(h) != len(want) {
			t.Fatalf("history %s = %+v, want %v", k, h, want)
		}
		for i, d := range h {
			if d.Outcome != want[i] || !d.Time.Equal(now) {
				t.Errorf("history %s[%d] = %s at %v, want %s at %v", k, i, d.Outcome, d.Time, want[i], now)
			}
			if d.Outcome == fencedstore.Expired && !d.Expires.Equal(now.Add(-time.Second)) {
				t.Errorf("history %s[%d]: expired with expiry %v recorded, want %v", k, i, d.Expires, now.Add(-time.Second))
			}
		}
		if err := fencemodel.CheckHistory(h); err != nil {
			t.Errorf("history %s does not replay: %v", k, err)
		}
	}
}

// testTokenRange checks the edge of the token range: (2^63-1, 2^63-1), the
// greatest token there is, establishes, publishes and compares like any
// other, and 2^63 is refused as a bad token without a trace.
func testTokenRange(t *testing.T, newStore Factory) {
	s := newStore(t)
	ctx := context.Background()
	const top = math.MaxInt64
	const key = "reports/edge-of-range.csv"
	expect(t, fencedstore.Established)(s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: T(top, top-1), Attempt: "a"}))
	res, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(top, top), Attempt: "b", Body: []byte("top")})
	if err != nil || res.Outcome != fencedstore.Applied || res.Greatest != T(top, top) {
		t.Fatalf("publish with (2^63-1, 2^63-1): %+v, %v", res, err)
	}
	expect(t, fencedstore.StaleOwner)(s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(top-1, top), Attempt: "c", Body: []byte("older")}))
	expect(t, fencedstore.StaleOwner)(s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: T(top, top-1), Attempt: "a"}))
	expect(t, fencedstore.Established)(s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: T(top, top), Attempt: "b"}))
	before := snapshot(t, s, key)
	if before.greatest != T(top, top) || before.body != "top" {
		t.Errorf("after the edge tokens: %+v, want greatest (2^63-1, 2^63-1) and body top", before)
	}
	for _, tok := range []fencedstore.Token{{Epoch: 1 << 63, Seq: 1}, {Epoch: 1, Seq: 1 << 63}, {Epoch: math.MaxUint64, Seq: math.MaxUint64}} {
		if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tok, Attempt: "z", Body: []byte("z")}); !errors.Is(err, fencedstore.ErrBadToken) {
			t.Errorf("publish with %s: err = %v, want ErrBadToken", tok, err)
		}
		if _, err := s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: tok, Attempt: "z"}); !errors.Is(err, fencedstore.ErrBadToken) {
			t.Errorf("establish with %s: err = %v, want ErrBadToken", tok, err)
		}
	}
	if after := snapshot(t, s, key); after != before {
		t.Errorf("out-of-range tokens changed the key: before %+v, after %+v", before, after)
	}
	h, err := s.History(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 5 {
		t.Errorf("history has %d decisions, want 5 (the refused out-of-range calls leave none): %+v", len(h), h)
	}
	for _, d := range h {
		if d.Token.Epoch < top-1 || d.Token.Seq < top-1 {
			t.Errorf("history holds %s, not a token at the edge of the range", d.Token)
		}
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
	expect(t, fencedstore.Established)(s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: T(1, 10), Attempt: "w1"}))
	expect(t, fencedstore.Established)(s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: T(2, 14), Attempt: "w2"}))
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
		if _, err := s.Establish(ctx, fencedstore.EstablishRequest{Key: k, Token: T(1, 1), Attempt: "a"}); !errors.Is(err, fencedstore.ErrInvalidKey) {
			t.Errorf("establish %q: err = %v, want ErrInvalidKey", k, err)
		}
	}
	if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "ok", Token: fencedstore.Token{}, Attempt: "a", Body: []byte("x")}); !errors.Is(err, fencedstore.ErrBadToken) {
		t.Errorf("publish with the zero token: err = %v, want ErrBadToken", err)
	}
	for _, exp := range []time.Time{time.Unix(fencedstore.MaxExpiresUnix+1, 0), time.Unix(-1, 0)} {
		if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "ok", Token: T(1, 1), Attempt: "a", Body: []byte("x"), Expires: exp}); !errors.Is(err, fencedstore.ErrBadToken) {
			t.Errorf("publish expiring %s: err = %v, want ErrBadToken", exp.UTC(), err)
		}
		if _, err := s.Establish(ctx, fencedstore.EstablishRequest{Key: "ok", Token: T(1, 1), Attempt: "a", Expires: exp}); !errors.Is(err, fencedstore.ErrBadToken) {
			t.Errorf("establish expiring %s: err = %v, want ErrBadToken", exp.UTC(), err)
		}
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

package fencemodel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
)

// brokenStore is the honest MemStore with the state its publish rules see
// rewritten by bug first.
func brokenStore(bug func(fencedstore.Meta) fencedstore.Meta) *fencemodel.MemStore {
	s := fencemodel.NewMemStore()
	s.DecidePublish = func(m fencedstore.Meta, floor fencedstore.Token, req fencedstore.PublishRequest, hash string, now time.Time) (fencedstore.Meta, fencedstore.Decision) {
		return fencedstore.DecidePublish(bug(m), floor, req, hash, now)
	}
	return s
}

var keys = []string{"reports/a.csv", "reports/b.csv", "reports/c.csv"}

// runAndCheck runs the workload on s and returns every finding of the
// three checkers.
func runAndCheck(t *testing.T, s fencedstore.Store) (fencemodel.Counts, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rec fencemodel.Recorder
	cnt := fencemodel.Workload{Keys: keys, Clients: 8, Calls: 150, Seed: 1}.Run(ctx, s, &rec)
	var findings []string
	res, _ := fencemodel.Check(rec.Operations(), 20*time.Second)
	if res != porcupine.Ok {
		findings = append(findings, fmt.Sprintf("porcupine: %s", res))
	}
	metas, _ := s.List(ctx, "")
	final := map[string]fencedstore.Token{}
	for _, m := range metas {
		final[m.Key] = m.Greatest
	}
	for _, err := range fencemodel.CheckFencing(rec.Operations(), final) {
		findings = append(findings, "fencing: "+err.Error())
	}
	for _, k := range keys {
		h, _ := s.History(ctx, k)
		if err := fencemodel.CheckHistory(h); err != nil {
			findings = append(findings, "history "+k+": "+err.Error())
		}
	}
	return cnt, findings
}

func TestWorkload_CorrectStorePasses(t *testing.T) {
	cnt, findings := runAndCheck(t, fencemodel.NewMemStore())
	for _, f := range findings {
		t.Error(f)
	}
	t.Log(cnt)
	if cnt.Applied == 0 || cnt.StaleOwner == 0 || cnt.Conflict == 0 || cnt.Established == 0 || cnt.Expired == 0 || cnt.Gets == 0 {
		t.Errorf("workload did not reach every outcome: %s", cnt)
	}
	if cnt.Unknown != 0 {
		t.Errorf("%d calls failed: %v", cnt.Unknown, cnt.FirstError)
	}
}

// The checkers must catch a store that breaks the rules.
func TestWorkload_BrokenStoresFail(t *testing.T) {
	bugs := map[string]func(fencedstore.Meta) fencedstore.Meta{
		// The classic bug: the store forgets to compare tokens.
		"no fence check": func(m fencedstore.Meta) fencedstore.Meta {
			m.Greatest = fencedstore.Token{}
			return m
		},
		// The lock-only bug: only the token of the current body counts,
		// so an establish does not shut older writers out.
		"establish ignored": func(m fencedstore.Meta) fencedstore.Meta {
			m.Greatest = m.Token
			return m
		},
		// Expected versions never checked.
		"version ignored": func(m fencedstore.Meta) fencedstore.Meta {
			return m
		},
	}
	for name, bug := range bugs {
		t.Run(name, func(t *testing.T) {
			s := brokenStore(bug)
			if name == "version ignored" {
				st := &versionBlind{MemStore: fencemodel.NewMemStore()}
				_, findings := runAndCheck(t, st)
				if len(findings) == 0 {
					t.Fatal("no checker noticed a store that ignores expected versions")
				}
				t.Logf("%d findings, first: %s", len(findings), findings[0])
				return
			}
			_, findings := runAndCheck(t, s)
			if len(findings) == 0 {
				t.Fatal("no checker noticed the broken store")
			}
			fencing := 0
			for _, f := range findings {
				if strings.HasPrefix(f, "fencing: ") {
					fencing++
				}
			}
			if name == "no fence check" && fencing == 0 {
				t.Error("CheckFencing did not notice stale writes being applied")
			}
			t.Logf("%d findings, first: %s", len(findings), findings[0])
		})
	}
}

// versionBlind drops the expected version of every publish.
type versionBlind struct{ *fencemodel.MemStore }

func (s *versionBlind) Publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	req.ExpectedVersion = nil
	return s.MemStore.Publish(ctx, req)
}

func TestCheck_HandWrittenHistories(t *testing.T) {
	tk := func(e, s uint64) fencedstore.Token { return fencedstore.Token{Epoch: e, Seq: s} }
	pub := func(tok fencedstore.Token, attempt, hash string) fencemodel.Input {
		return fencemodel.Input{Kind: fencemodel.Publish, Key: "k", Token: tok, Attempt: attempt, Hash: hash, Expected: fencemodel.NoVersion}
	}
	applied := func(v uint64, g fencedstore.Token) fencemodel.Output {
		return fencemodel.Output{Outcome: fencedstore.Applied, Version: v, Greatest: g}
	}
	expiring := func(in fencemodel.Input) fencemodel.Input {
		in.Expires = time.Unix(1_000_000_000, 0).UTC()
		return in
	}
	op := func(call, ret int64, in fencemodel.Input, out fencemodel.Output) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
	}
	cases := []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"W2 then stale W1 refused", []porcupine.Operation{
			op(0, 1, pub(tk(2, 14), "w2", "fresh"), applied(1, tk(2, 14))),
			op(2, 3, pub(tk(1, 10), "w1", "stale"), fencemodel.Output{Outcome: fencedstore.StaleOwner, Version: 1, Greatest: tk(2, 14)}),
		}, porcupine.Ok},
		{"W2 then stale W1 applied", []porcupine.Operation{
			op(0, 1, pub(tk(2, 14), "w2", "fresh"), applied(1, tk(2, 14))),
			op(2, 3, pub(tk(1, 10), "w1", "stale"), applied(2, tk(2, 14))),
		}, porcupine.Illegal},
		{"concurrent: W1 may go first", []porcupine.Operation{
			op(0, 3, pub(tk(2, 14), "w2", "fresh"), applied(2, tk(2, 14))),
			op(1, 2, pub(tk(1, 10), "w1", "stale"), applied(1, tk(1, 10))),
		}, porcupine.Ok},
		{"unknown outcome may have happened", []porcupine.Operation{
			op(0, 1<<62, pub(tk(3, 1), "w3", "x"), fencemodel.Output{Unknown: true}),
			op(2, 3, pub(tk(2, 1), "w2", "y"), fencemodel.Output{Outcome: fencedstore.StaleOwner, Version: 1, Greatest: tk(3, 1)}),
		}, porcupine.Ok},
		{"expiring newer call refused as expired, nothing changed", []porcupine.Operation{
			op(0, 1, pub(tk(1, 1), "w1", "one"), applied(1, tk(1, 1))),
			op(2, 3, expiring(pub(tk(2, 1), "w2", "two")), fencemodel.Output{Outcome: fencedstore.Expired, Version: 1, Greatest: tk(1, 1)}),
			op(4, 5, pub(tk(1, 1), "w1", "three"), applied(2, tk(1, 1))),
		}, porcupine.Ok},
		{"expired answer to a call without an expiry", []porcupine.Operation{
			op(0, 1, pub(tk(1, 1), "w1", "one"), applied(1, tk(1, 1))),
			op(2, 3, pub(tk(2, 1), "w2", "two"), fencemodel.Output{Outcome: fencedstore.Expired, Version: 1, Greatest: tk(1, 1)}),
		}, porcupine.Illegal},
		{"expired call that raised the greatest token", []porcupine.Operation{
			op(0, 1, pub(tk(1, 1), "w1", "one"), applied(1, tk(1, 1))),
			op(2, 3, expiring(pub(tk(2, 1), "w2", "two")), fencemodel.Output{Outcome: fencedstore.Expired, Version: 1, Greatest: tk(2, 1)}),
			op(4, 5, pub(tk(1, 1), "w1", "three"), fencemodel.Output{Outcome: fencedstore.StaleOwner, Version: 1, Greatest: tk(2, 1)}),
		}, porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := fencemodel.Check(tc.ops, 5*time.Second)
			if res != tc.want {
				t.Errorf("check = %s, want %s", res, tc.want)
			}
		})
	}
}

func TestCheckHistory_RefusesImpossibleHistories(t *testing.T) {
	tk := func(e, s uint64) fencedstore.Token { return fencedstore.Token{Epoch: e, Seq: s} }
	good := []fencedstore.Decision{
		{Outcome: fencedstore.Established, Token: tk(1, 10), Attempt: "w1"},
		{Outcome: fencedstore.Established, Token: tk(2, 14), Attempt: "w2", Greatest: tk(1, 10)},
		{Outcome: fencedstore.Applied, Token: tk(2, 14), Attempt: "w2", Version: 1, Greatest: tk(2, 14), Hash: "h"},
		{Outcome: fencedstore.StaleOwner, Token: tk(1, 10), Attempt: "w1", Version: 1, Greatest: tk(2, 14), Hash: "s"},
	}
	if err := fencemodel.CheckHistory(good); err != nil {
		t.Fatalf("good history refused: %v", err)
	}
	bad := append([]fencedstore.Decision(nil), good...)
	bad[3].Outcome, bad[3].Version = fencedstore.Applied, 2
	if err := fencemodel.CheckHistory(bad); err == nil {
		t.Error("a stale publish recorded as applied was accepted")
	}

	// Expiries: judged at each decision's recorded time.
	at := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	before, after := at.Add(-time.Second), at.Add(time.Second)
	withExpiry := []fencedstore.Decision{
		{Outcome: fencedstore.Applied, Token: tk(1, 1), Attempt: "w1", Version: 1, Hash: "h", Time: at, Expires: after},
		{Outcome: fencedstore.Expired, Token: tk(2, 1), Attempt: "w2", Version: 1, Greatest: tk(1, 1), Hash: "x", Time: at, Expires: before},
		{Outcome: fencedstore.Expired, Token: tk(3, 1), Attempt: "w3", Version: 1, Greatest: tk(1, 1), Time: at, Expires: before},
		{Outcome: fencedstore.StaleOwner, Token: tk(1, 0), Attempt: "w0", Version: 1, Greatest: tk(1, 1), Hash: "s", Time: at, Expires: after},
	}
	if err := fencemodel.CheckHistory(withExpiry); err != nil {
		t.Fatalf("good history with expiries refused: %v", err)
	}
	for name, change := range map[string]func(h []fencedstore.Decision){
		"expired before its expiry": func(h []fencedstore.Decision) { h[1].Expires = after },
		"expired without an expiry": func(h []fencedstore.Decision) { h[2].Expires = time.Time{} },
		"applied after its expiry":  func(h []fencedstore.Decision) { h[0].Expires = before },
		"stale after its expiry":    func(h []fencedstore.Decision) { h[3].Expires = before },
		"greatest moved by the refusals": func(h []fencedstore.Decision) {
			h[3].Greatest = tk(2, 1)
		},
	} {
		h := append([]fencedstore.Decision(nil), withExpiry...)
		change(h)
		if err := fencemodel.CheckHistory(h); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A deleted key keeps its greatest token: the model accepts a store that
// refuses the old owner after retention deleted its key, and catches one
// whose deletion forgot the token and let the old owner write again.
func TestModel_TombstoneRefusesStaleTokens(t *testing.T) {
	run := func(s *fencemodel.MemStore) (porcupine.CheckResult, error) {
		ctx := context.Background()
		var rec fencemodel.Recorder
		const key = "reports/2026-07.csv"
		rec.Publish(ctx, s, 0, fencedstore.PublishRequest{Key: key, Token: fencedstore.Token{Epoch: 2, Seq: 9}, Attempt: "w2", Body: []byte("new")})
		rec.Delete(s, 1, key)
		rec.Publish(ctx, s, 2, fencedstore.PublishRequest{Key: key, Token: fencedstore.Token{Epoch: 1, Seq: 4}, Attempt: "w1", Body: []byte("old")})
		rec.Get(ctx, s, 0, key)
		rec.Publish(ctx, s, 0, fencedstore.PublishRequest{Key: key, Token: fencedstore.Token{Epoch: 2, Seq: 9}, Attempt: "w2", Body: []byte("new")})
		rec.Publish(ctx, s, 0, fencedstore.PublishRequest{Key: key, Token: fencedstore.Token{Epoch: 3, Seq: 1}, Attempt: "w3", Body: []byte("newer")})
		res, _ := fencemodel.Check(rec.Operations(), 10*time.Second)
		h, _ := s.History(ctx, key)
		return res, fencemodel.CheckHistory(h)
	}
	if res, err := run(fencemodel.NewMemStore()); res != porcupine.Ok || err != nil {
		t.Errorf("honest store: porcupine %s, history %v; want ok", res, err)
	}
	broken := fencemodel.NewMemStore()
	broken.ForgetOnDelete = true
	if res, _ := run(broken); res != porcupine.Illegal {
		t.Errorf("a store whose deletion forgets the token: porcupine %s, want illegal", res)
	}
}

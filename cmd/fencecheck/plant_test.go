package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
)

// plantedStore is a fenced store in memory that follows the rules table,
// except that, once armed, it accepts one publish whose token is older
// than the key's greatest — the bug a missing or racy check would be —
// and otherwise keeps honest books: the decision is recorded as applied
// with the greatest token the key really had, and the greatest token
// does not go back.
type plantedStore struct {
	mu      sync.Mutex
	keys    map[string]*plantedKey
	armed   bool
	planted string // the write it wrongly accepted
}

type plantedKey struct {
	meta fencedstore.Meta
	body []byte
	hist []fencedstore.Decision
}

var _ fencedstore.Store = (*plantedStore)(nil)

func newPlantedStore(armed bool) *plantedStore {
	return &plantedStore{keys: map[string]*plantedKey{}, armed: armed}
}

func (s *plantedStore) key(k string) *plantedKey {
	if s.keys[k] == nil {
		s.keys[k] = &plantedKey{meta: fencedstore.Meta{Key: k}}
	}
	return s.keys[k]
}

func (s *plantedStore) Establish(ctx context.Context, key string, tok fencedstore.Token, attempt string) (fencedstore.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.key(key)
	var d fencedstore.Decision
	k.meta, d = fencedstore.DecideEstablish(k.meta, tok, attempt, time.Now())
	k.hist = append(k.hist, d)
	return fencedstore.Result{Outcome: d.Outcome, Key: key, Version: k.meta.Version, Greatest: k.meta.Greatest}, d.Err()
}

func (s *plantedStore) Publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.key(req.Key)
	m := k.meta
	plant := s.armed && req.Token.Less(m.Greatest)
	if plant {
		// The bug: the check sees the caller's token as the greatest.
		s.armed = false
		s.planted = fmt.Sprintf("%s by %s over greatest %s", req.Token, req.Attempt, m.Greatest)
		m.Greatest = req.Token
	}
	next, d := fencedstore.DecidePublish(m, req, fencedstore.Hash(req.Body), time.Now())
	if plant {
		next.Greatest, d.Greatest = k.meta.Greatest, k.meta.Greatest
	}
	if next.Version != k.meta.Version {
		k.body = bytes.Clone(req.Body)
	}
	k.meta = next
	k.hist = append(k.hist, d)
	return fencedstore.Result{Outcome: d.Outcome, Key: req.Key, Version: k.meta.Version, Greatest: k.meta.Greatest}, d.Err()
}

func (s *plantedStore) Get(ctx context.Context, key string) (fencedstore.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	if k == nil || k.meta.Version == 0 {
		return fencedstore.Object{}, fencedstore.ErrNotFound
	}
	return fencedstore.Object{Meta: k.meta, Body: bytes.Clone(k.body)}, nil
}

func (s *plantedStore) List(ctx context.Context, prefix string) ([]fencedstore.Meta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []fencedstore.Meta
	for name, k := range s.keys {
		if strings.HasPrefix(name, prefix) {
			out = append(out, k.meta)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (s *plantedStore) History(ctx context.Context, key string) ([]fencedstore.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	if k == nil {
		return nil, fencedstore.ErrNotFound
	}
	return append([]fencedstore.Decision(nil), k.hist...), nil
}

// simulateCluster drives a store the way a cluster's workers do: every run
// of a job that writes one shared key is granted a newer token, its worker
// establishes, runs, and publishes; every third run is slow, so the next
// run establishes before it publishes and its late write must be refused.
// It returns what the cluster would report about the runs.
func simulateCluster(t *testing.T, s fencedstore.Store, n int) []jobs.Run {
	t.Helper()
	ctx := context.Background()
	const key = "shared/a"
	start := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	runs := make([]jobs.Run, n)
	tokens := make([]fencedstore.Token, n)
	for i := range runs {
		at := start.Add(time.Duration(i) * time.Second)
		id := jobs.RunID("shared", at)
		tokens[i] = fencedstore.Token{Epoch: 2 + uint64(i/10), Seq: 10 + 3*uint64(i)}
		runs[i] = jobs.Run{ID: id, Job: "shared", ScheduledAt: at, Output: key, Trigger: "schedule", Attempts: []jobs.Attempt{{
			ID: jobs.AttemptID(id, 1), Number: 1, Worker: fmt.Sprintf("w%d", i%3),
			Token: jobs.Fence{Epoch: tokens[i].Epoch, Seq: tokens[i].Seq}, GrantedAt: at,
		}}}
	}
	publish := func(i int) {
		a := &runs[i].Attempts[0]
		res, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tokens[i], Attempt: a.ID, Body: []byte(a.ID)})
		a.StoreOutcome, a.StoreVersion = string(res.Outcome), res.Version
		switch {
		case errors.Is(err, fencedstore.ErrStaleOwner):
			a.State = jobs.Fenced
		case err != nil:
			t.Fatal(err)
		default:
			a.State = jobs.Succeeded
		}
		runs[i].State = a.State
	}
	for i := range runs {
		a := &runs[i].Attempts[0]
		if _, err := s.Establish(ctx, key, tokens[i], a.ID); err != nil {
			a.State, a.StoreOutcome = jobs.Fenced, string(fencedstore.StaleOwner)
			runs[i].State = a.State
			continue
		}
		if i > 0 && (i-1)%3 == 0 {
			publish(i - 1) // the slow one, after this run established
		}
		if i%3 != 0 || i == n-1 {
			publish(i)
		}
	}
	return runs
}

// observe runs the simulated cluster against s the way a real one reaches
// its store — served over HTTP by a node, through the harness's store
// proxy, which records every call — and reads it back the way the harness
// does at the end of a run.
func observe(t *testing.T, s fencedstore.Store, n int) *Observation {
	t.Helper()
	signer, err := fencedstore.NewSigner([]byte("planted-store-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&httpstore.Handler{Store: s, Signer: signer, Logger: slog.New(slog.DiscardHandler)})
	defer srv.Close()
	proxy, err := ListenStoreProxy("127.0.0.1:0", srv.URL, signer)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	runs := simulateCluster(t, httpstore.NewClient(proxy.Addr(), signer), n)
	o := NewObservation()
	o.AddRuns("n1", time.Now(), runs)
	if err := readStore(context.Background(), httpstore.NewClient(srv.URL, nil), o); err != nil {
		t.Fatal(err)
	}
	o.Calls = proxy.Operations()
	if len(o.Calls) == 0 {
		t.Fatal("the proxy recorded no calls")
	}
	return o
}

func resultOf(t *testing.T, rs []CheckResult, name string) CheckResult {
	t.Helper()
	for _, r := range rs {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no check %q", name)
	return CheckResult{}
}

// The checker passes an honest store, and catches a store that accepts an
// older token once: in the store's own history (the stale write, the
// replay, the porcupine model, the fencing checker) and in the answers the
// clients got (porcupine and the fencing checker over the proxy's record).
func TestCheck_CatchesPlantedStaleWrite(t *testing.T) {
	t.Run("honest", func(t *testing.T) {
		o := observe(t, newPlantedStore(false), 30)
		for _, r := range Check(o, CheckOptions{}) {
			if !r.OK() {
				t.Errorf("%s: %d violations: %v", r.Name, r.Violations, r.Details)
			}
		}
		if got := resultOf(t, Check(o, CheckOptions{}), CheckStaleWrite).Checked; got < 50 {
			t.Errorf("checked %d decisions, want the whole history", got)
		}
	})
	t.Run("planted", func(t *testing.T) {
		s := newPlantedStore(true)
		o := observe(t, s, 30)
		if s.planted == "" {
			t.Fatal("the workload never sent a stale publish; nothing was planted")
		}
		t.Logf("planted: %s", s.planted)
		rs := Check(o, CheckOptions{})
		for _, name := range []string{CheckStaleWrite, CheckStoreReplay, CheckPorcupine, CheckStoreFencing, CheckClientModel} {
			r := resultOf(t, rs, name)
			if r.OK() {
				t.Errorf("%s: passed a history with a stale write applied", name)
			} else {
				t.Logf("%s: %v", name, r.Details)
			}
		}
		if r := resultOf(t, rs, CheckStaleWrite); r.Violations != 1 {
			t.Errorf("%d stale writes found, want exactly the planted one: %v", r.Violations, r.Details)
		}
	})
}

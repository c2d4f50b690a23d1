package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
)

// plantedStore is the honest in-memory store of fencemodel, except that,
// once armed, it accepts one publish whose token is older than the key's
// greatest — the bug a missing or racy check would be — and otherwise
// keeps honest books: the decision is recorded as applied with the
// greatest token the key really had, and the greatest token does not go
// back.
type plantedStore struct {
	*fencemodel.MemStore
	mu      sync.Mutex
	armed   bool
	planted string // the write it wrongly accepted
}

func newPlantedStore(armed bool) *plantedStore {
	s := &plantedStore{MemStore: fencemodel.NewMemStore(), armed: armed}
	s.MemStore.DecidePublish = s.decide
	return s
}

// decide runs under the MemStore's lock.
func (s *plantedStore) decide(m fencedstore.Meta, floor fencedstore.Token, req fencedstore.PublishRequest, hash string, now time.Time) (fencedstore.Meta, fencedstore.Decision) {
	s.mu.Lock()
	plant := s.armed && req.Token.Less(m.Greatest)
	if plant {
		s.armed = false
		s.planted = fmt.Sprintf("%s by %s over greatest %s", req.Token, req.Attempt, m.Greatest)
	}
	s.mu.Unlock()
	if !plant {
		return fencedstore.DecidePublish(m, floor, req, hash, now)
	}
	// The bug: the check sees the caller's token as the greatest.
	greatest := m.Greatest
	m.Greatest = req.Token
	next, d := fencedstore.DecidePublish(m, floor, req, hash, now)
	next.Greatest, d.Greatest = greatest, greatest
	return next, d
}

func (s *plantedStore) plantedWrite() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.planted
}

// simulateCluster drives a store the way a cluster's workers do: every run
// of a job that writes one shared key is granted a newer token, its worker
// establishes, runs, and publishes; every third run is slow, so the next
// run establishes before it publishes and its late write must be refused;
// and every seventh run publishes after its token expired, refused as
// expired. It returns what the cluster would report about the runs.
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
		expires := time.Now().Add(time.Hour)
		if i%7 == 5 {
			expires = time.Now().Add(-time.Hour)
		}
		res, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tokens[i], Attempt: a.ID, Body: []byte(a.ID), Expires: expires})
		a.StoreOutcome, a.StoreVersion = string(res.Outcome), res.Version
		switch {
		case errors.Is(err, fencedstore.ErrStaleOwner), errors.Is(err, fencedstore.ErrExpired):
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
		if _, err := s.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: tokens[i], Attempt: a.ID}); err != nil {
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
	signer, err := fencedstore.NewSigner([]byte("planted-store-cluster-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&httpstore.Handler{Store: s, Signer: signer, Logger: slog.New(slog.DiscardHandler)})
	defer srv.Close()
	proxy, err := ListenStoreProxy("127.0.0.1:0", srv.URL, signer, nil)
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
		// The runs refused as expired were among them, and the store's
		// decisions and the cluster's record agree about them.
		if c := countObservation(o); c.ExpiredRefused == 0 {
			t.Errorf("counts %+v: no publish was refused as expired", c)
		}
	})
	t.Run("planted", func(t *testing.T) {
		s := newPlantedStore(true)
		o := observe(t, s, 30)
		if s.plantedWrite() == "" {
			t.Fatal("the workload never sent a stale publish; nothing was planted")
		}
		t.Logf("planted: %s", s.plantedWrite())
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

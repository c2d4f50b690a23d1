package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/fencemodel"
)

// testFloors checks RaiseFloor: a released token, and every older one of
// its job, is refused as stale_owner on every key from then on (one it
// wrote, one it established, one nobody touched), the refusal names the
// floor and is in the key's history; other jobs and newer tokens of the
// job are unaffected; a floor never goes down.
func testFloors(t *testing.T, newStore Factory) {
	s := newStore(t)
	ctx := context.Background()
	const job = "report"
	released := T(2, 5)
	pub := func(key string, tok fencedstore.Token, job, body string) (fencedstore.Result, error) {
		return s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tok, Attempt: job + "@" + tok.String(), Job: job, Body: []byte(body)})
	}
	if _, err := s.RaiseFloor(ctx, "", released); !errors.Is(err, fencedstore.ErrInvalidJob) {
		t.Errorf("raise the floor of no job: err = %v, want ErrInvalidJob", err)
	}
	if _, err := s.RaiseFloor(ctx, job, fencedstore.Token{}); !errors.Is(err, fencedstore.ErrBadToken) {
		t.Errorf("raise a floor to the zero token: err = %v, want ErrBadToken", err)
	}

	// The attempt establishes and writes its keys.
	expect(t, fencedstore.Established)(s.Establish(ctx, fencedstore.EstablishRequest{Key: "reports/out.csv", Token: released, Attempt: "a", Job: job}))
	expect(t, fencedstore.Applied)(pub("reports/side.csv", released, job, "before"))
	floor, err := s.RaiseFloor(ctx, job, released)
	if err != nil || floor != released {
		t.Fatalf("raise the floor to %s: %s, %v", released, floor, err)
	}

	// From now on its token, and older ones of the job, are refused.
	for _, c := range []struct {
		key string
		tok fencedstore.Token
	}{
		{"reports/side.csv", released}, // a key it wrote
		{"reports/out.csv", released},  // a key it established
		{"reports/fresh.csv", released},
		{"reports/fresh2.csv", T(1, 9)},
	} {
		before := snapshot(t, s, c.key)
		res, err := pub(c.key, c.tok, job, "after the release")
		var rev *fencedstore.RevokedError
		if res.Outcome != fencedstore.StaleOwner || !errors.Is(err, fencedstore.ErrStaleOwner) || !errors.As(err, &rev) || rev.Floor != released || res.Floor != released {
			t.Errorf("publish %s with %s after the floor: %+v, err %v; want stale_owner naming floor %s", c.key, c.tok, res, err, released)
		}
		if after := snapshot(t, s, c.key); after != before {
			t.Errorf("the refused publish changed %s: %+v -> %+v", c.key, before, after)
		}
		h, err := s.History(ctx, c.key)
		if err != nil || len(h) == 0 {
			t.Fatalf("history %s: %v", c.key, err)
		}
		if last := h[len(h)-1]; last.Outcome != fencedstore.StaleOwner || last.Token != c.tok || last.Floor != released {
			t.Errorf("history %s ends with %+v, want stale_owner of %s naming floor %s", c.key, last, c.tok, released)
		}
		if err := fencemodel.CheckHistory(h); err != nil {
			t.Errorf("history %s does not replay: %v", c.key, err)
		}
	}
	if res, err := s.Establish(ctx, fencedstore.EstablishRequest{Key: "reports/other.csv", Token: released, Attempt: "a", Job: job}); res.Outcome != fencedstore.StaleOwner || res.Floor != released {
		t.Errorf("establish with the released token: %+v, %v; want stale_owner naming the floor", res, err)
	}
	if _, err := s.Get(ctx, "reports/fresh.csv"); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Errorf("a refused publish on a new key left a body: %v", err)
	}

	// Another job's token of the same order, and the job's retry with a
	// newer token, are decided by the key alone.
	expect(t, fencedstore.Applied)(pub("logs/x.txt", released, "other", "x"))
	expect(t, fencedstore.Applied)(pub("reports/side.csv", T(2, 6), job, "retry"))

	// A floor only rises.
	if floor, err := s.RaiseFloor(ctx, job, T(1, 1)); err != nil || floor != released {
		t.Errorf("raise the floor to an older token: %s, %v; want it kept at %s", floor, err, released)
	}
	if floor, err := s.RaiseFloor(ctx, job, T(3, 1)); err != nil || floor != T(3, 1) {
		t.Errorf("raise the floor to 3.1: %s, %v", floor, err)
	}
	if res, _ := pub("reports/side.csv", T(2, 6), job, "late"); res.Outcome != fencedstore.StaleOwner || res.Floor != T(3, 1) {
		t.Errorf("the retry's token under the raised floor: %+v, want stale_owner naming 3.1", res)
	}
}

// testFloorRace raises a job's floor while the job's calls are in flight:
// once RaiseFloor has returned, nothing at or below the floor may change
// a key, not even a call that was already deciding when it was raised.
func testFloorRace(t *testing.T, newStore Factory) {
	s := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const job, writers, calls = "race", 8, 40
	floor := T(1, 1_000_000) // above every token the writers send
	var wg sync.WaitGroup
	var raised sync.Once
	raisedCh := make(chan struct{})
	var errs []string
	var mu sync.Mutex
	for w := range writers {
		wg.Go(func() {
			for i := range calls {
				if ctx.Err() != nil {
					return
				}
				if w == 0 && i == calls/4 {
					raised.Do(func() {
						if _, err := s.RaiseFloor(ctx, job, floor); err != nil {
							mu.Lock()
							errs = append(errs, fmt.Sprintf("raise: %v", err))
							mu.Unlock()
						}
						close(raisedCh)
					})
				}
				key := fmt.Sprintf("race/%d.txt", w)
				tok := T(1, uint64(w*calls+i+1))
				_, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: tok, Attempt: "w", Job: job, Body: []byte(tok.String())})
				if err != nil && !fencedstore.IsDecision(err) {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("publish %s: %v", key, err))
					mu.Unlock()
				}
			}
		})
	}
	<-raisedCh
	// What the keys hold the moment the floor is up; nothing may change
	// them afterwards.
	seen := map[string]keyState{}
	for w := range writers {
		key := fmt.Sprintf("race/%d.txt", w)
		seen[key] = snapshot(t, s, key)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed: %s", len(errs), strings.Join(errs, "; "))
	}
	for key, before := range seen {
		if after := snapshot(t, s, key); after != before {
			t.Errorf("%s changed after its job's floor was raised above every token: %+v -> %+v", key, before, after)
		}
	}
}

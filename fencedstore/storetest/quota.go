package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
)

// RunQuota checks calls with a quota (fencedstore.Quota): the keys under
// its prefix never hold more keys or bytes than it allows, a refusal
// names the limit and writes nothing, not even history, and many calls
// at the edge at once are applied exactly up to it. Run it against
// stores that hold the data (not an HTTP client, which does not send
// quotas).
func RunQuota(t *testing.T, newStore Factory) {
	ctx := context.Background()
	t.Run("QuotaKeys", func(t *testing.T) {
		s := newStore(t)
		q := &fencedstore.Quota{Job: "report", Prefix: "reports/", Keys: 3, Bytes: 1 << 20}
		pub := func(key, body string, q *fencedstore.Quota) error {
			_, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, 1), Attempt: "a", Job: "report", Body: []byte(body), Quota: q})
			return err
		}
		for i := range 3 {
			if err := pub(fmt.Sprintf("reports/%d", i), "x", q); err != nil {
				t.Fatalf("publish %d within the quota: %v", i, err)
			}
		}
		err := pub("reports/3", "x", q)
		if !errors.Is(err, fencedstore.ErrQuota) || !strings.Contains(err.Error(), `scope "reports/" of job report holds 3 keys; the limit is 3 (store.quota.keys)`) {
			t.Errorf("a fourth key: err = %v, want ErrQuota naming the limit", err)
		}
		_, err = s.Establish(ctx, fencedstore.EstablishRequest{Key: "reports/4", Token: T(1, 1), Attempt: "a", Job: "report", Quota: q})
		if !errors.Is(err, fencedstore.ErrQuota) {
			t.Errorf("an establish of a fourth key: err = %v, want ErrQuota", err)
		}
		for _, k := range []string{"reports/3", "reports/4"} {
			if _, err := s.History(ctx, k); !errors.Is(err, fencedstore.ErrNotFound) {
				t.Errorf("a refusal over the quota left history on %s: %v", k, err)
			}
		}
		if err := pub("reports/0", "again", q); err != nil {
			t.Errorf("a rewrite within a full quota: %v", err)
		}
		if err := pub("logs/0", "x", &fencedstore.Quota{Job: "logs", Prefix: "logs/", Keys: 3, Bytes: 1 << 20}); err != nil {
			t.Errorf("another scope: %v", err)
		}
		if err := pub("reports/node", "x", nil); err != nil {
			t.Errorf("a call without a quota into a full scope: %v", err)
		}
		if metas, _ := s.List(ctx, "reports/"); len(metas) != 4 {
			t.Errorf("reports/ holds %d keys, want the quota's 3 and the one without", len(metas))
		}
	})
	t.Run("QuotaBytes", func(t *testing.T) {
		s := newStore(t)
		q := &fencedstore.Quota{Job: "report", Prefix: "reports/", Keys: 100, Bytes: 100}
		pub := func(key string, n int) error {
			_, err := s.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: T(1, 1), Attempt: "a", Body: []byte(strings.Repeat("x", n)), Quota: q})
			return err
		}
		if err := pub("reports/a", 60); err != nil {
			t.Fatal(err)
		}
		if err := pub("reports/b", 41); !errors.Is(err, fencedstore.ErrQuota) || !strings.Contains(err.Error(), "holds 60 bytes, 101 with this body; the limit is 100 (store.quota.bytes)") {
			t.Errorf("60 + 41 of 100 bytes: err = %v, want ErrQuota naming the limit", err)
		}
		if err := pub("reports/a", 100); err != nil {
			t.Errorf("a rewrite replacing its own 60 bytes with 100: %v", err)
		}
	})
	t.Run("QuotaAtTheEdgeAtOnce", func(t *testing.T) {
		s := newStore(t)
		q := &fencedstore.Quota{Job: "report", Prefix: "reports/", Keys: 5, Bytes: 1 << 20}
		const writers = 24
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				_, errs[i] = s.Publish(ctx, fencedstore.PublishRequest{Key: fmt.Sprintf("reports/%d", i), Token: T(1, 1), Attempt: "a", Body: []byte("x"), Quota: q})
			})
		}
		wg.Wait()
		applied := 0
		for _, err := range errs {
			switch {
			case err == nil:
				applied++
			case !errors.Is(err, fencedstore.ErrQuota):
				t.Errorf("publish: %v, want applied or ErrQuota", err)
			}
		}
		metas, err := s.List(ctx, "reports/")
		if err != nil {
			t.Fatal(err)
		}
		if applied != 5 || len(metas) != 5 {
			t.Errorf("%d applied, %d keys under reports/; want exactly the quota's 5", applied, len(metas))
		}
	})
}

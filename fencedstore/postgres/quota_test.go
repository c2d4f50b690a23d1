package postgres_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

// With PostgreSQL every node serves the store. Three of them (three
// handlers, each with its own connection pool, on real loopback
// listeners) take many concurrent publishes of two jobs' tokens that
// share a scope, spread over all three: the quota holds exactly, however
// the writes fall, and every refusal names it.
func TestStore_QuotaHoldsAcrossNodes(t *testing.T) {
	url := testURL(t)
	for _, tc := range []struct {
		name      string
		keys      int64
		bytes     int64
		body      int
		applied   int
		limitText string
	}{
		{"keys", 5, 0, 1, 5, "the limit is 5 (store.quota.keys)"},
		{"bytes", 0, 50, 10, 5, "the limit is 50 (store.quota.bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := newSchema(t, url)
			sg, err := fencedstore.NewSigner([]byte("quota-across-nodes-cluster-secret-0123456789"))
			if err != nil {
				t.Fatal(err)
			}
			var nodes []*httptest.Server
			for range 3 {
				h := &httpstore.Handler{Store: open(t, url, schema, storetest.Options{}), Signer: sg, QuotaKeys: tc.keys, QuotaBytes: tc.bytes}
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				nodes = append(nodes, srv)
			}
			var toks []string
			for _, job := range []string{"a", "b"} {
				tok, err := sg.Sign(fencedstore.SignedToken{Token: storetest.T(1, 1), Attempt: job + "@x.1",
					Scope: fencedstore.Scope{Job: job, Prefix: "reports/"}, Expires: time.Now().Add(time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				toks = append(toks, tok)
			}
			const writers = 30
			statuses := make([]int, writers)
			bodies := make([]string, writers)
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/api/v1/store/reports/%02d", nodes[i%3].URL, i), strings.NewReader(strings.Repeat("x", tc.body)))
					req.Header.Set("Fencecron-Token", toks[i%2])
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					statuses[i], bodies[i] = resp.StatusCode, string(b)
				})
			}
			wg.Wait()
			applied := 0
			for i, st := range statuses {
				switch {
				case st == http.StatusOK:
					applied++
				case st != http.StatusInsufficientStorage || !strings.Contains(bodies[i], tc.limitText):
					t.Errorf("writer %d: %d %s; want 200, or 507 naming the quota", i, st, bodies[i])
				}
			}
			metas, err := open(t, url, schema, storetest.Options{}).List(t.Context(), "reports/")
			if err != nil {
				t.Fatal(err)
			}
			var size int64
			for _, m := range metas {
				size += m.Size
			}
			if applied != tc.applied || len(metas) != tc.applied {
				t.Errorf("%d publishes applied, reports/ holds %d keys (%d bytes); want exactly the quota's %d", applied, len(metas), size, tc.applied)
			}
		})
	}
}

package httpstore_test

import (
	"context"
	"errors"
	"fmt"
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

// A job's token may fill its scope up to the key quota: a new key beyond
// it is refused with 507, naming the limit and the usage, whether by
// publish or establish; a key already there may still be written; keys
// outside the scope and the per-key tokens nodes sign are not counted.
func TestHandler_QuotaKeys(t *testing.T) {
	store, srv := serve(t, storetest.Options{}, func(h *httpstore.Handler) { h.QuotaKeys = 3 })
	sg := mustSigner(t, secret)
	tok := sign(t, sg, 1, 1, "report@x.1", "reports/")
	put := func(key, body string) answer {
		return do(t, srv, call{method: "PUT", path: "/api/v1/store/" + key, token: tok, body: body})
	}
	for i := range 3 {
		if a := put(fmt.Sprintf("reports/%d.csv", i), "x"); a.status != 200 {
			t.Fatalf("publish %d within the quota: %d %v", i, a.status, a.body)
		}
	}
	for _, a := range []answer{
		put("reports/3.csv", "x"),
		do(t, srv, call{method: "POST", path: "/api/v1/establish/reports/4.csv", token: tok}),
	} {
		msg, _ := a.body["error"].(string)
		if a.status != http.StatusInsufficientStorage || a.body["code"] != "quota" ||
			!strings.Contains(msg, `quota exceeded: scope "reports/" of job report holds 3 keys; the limit is 3 (store.quota.keys)`) {
			t.Errorf("a fourth key: %d %v, want 507 naming the limit", a.status, a.body)
		}
	}
	if a := put("reports/0.csv", "again"); a.status != 200 {
		t.Errorf("rewrite of a key within a full quota: %d %v", a.status, a.body)
	}
	// Per-key tokens (a node's own publish of a job's stdout) are not
	// counted; nor are keys outside the scope.
	node := httpstore.NewClient(srv.URL, sg)
	node.HTTP = srv.Client()
	if _, err := node.Publish(context.Background(), fencedstore.PublishRequest{Key: "reports/stdout.csv", Token: storetest.T(1, 2), Attempt: "report@y.1", Body: []byte("x")}); err != nil {
		t.Errorf("a node's per-key publish into a full scope: %v", err)
	}
	other := sign(t, sg, 1, 1, "logs@x.1", "logs/")
	if a := do(t, srv, call{method: "PUT", path: "/api/v1/store/logs/1.txt", token: other, body: "x"}); a.status != 200 {
		t.Errorf("another scope: %d %v", a.status, a.body)
	}
	metas, err := store.List(context.Background(), "reports/")
	if err != nil || len(metas) != 4 {
		t.Errorf("reports/ holds %d keys (%v), want the 3 of the quota and the node's", len(metas), err)
	}
	// The client names the refusal.
	job := httpstore.NewClient(srv.URL, nil)
	job.HTTP = srv.Client()
	if _, err := job.PublishSigned(context.Background(), tok, fencedstore.PublishRequest{Key: "reports/9.csv", Body: []byte("x")}); !errors.Is(err, fencedstore.ErrQuota) || !strings.Contains(err.Error(), "store.quota.keys") {
		t.Errorf("client publish over the quota: err = %v, want ErrQuota naming the limit", err)
	}
}

// The byte quota counts the bodies under the scope, a rewrite replacing
// its key's old body.
func TestHandler_QuotaBytes(t *testing.T) {
	_, srv := serve(t, storetest.Options{}, func(h *httpstore.Handler) { h.QuotaBytes = 100 })
	tok := sign(t, mustSigner(t, secret), 1, 1, "report@x.1", "reports/")
	put := func(key string, n int) answer {
		return do(t, srv, call{method: "PUT", path: "/api/v1/store/" + key, token: tok, body: strings.Repeat("x", n)})
	}
	if a := put("reports/a", 60); a.status != 200 {
		t.Fatalf("60 of 100 bytes: %d %v", a.status, a.body)
	}
	a := put("reports/b", 50)
	msg, _ := a.body["error"].(string)
	if a.status != http.StatusInsufficientStorage || !strings.Contains(msg, `scope "reports/" of job report holds 60 bytes, 110 with this body; the limit is 100 (store.quota.bytes)`) {
		t.Errorf("110 of 100 bytes: %d %v, want 507 naming the limit and the usage", a.status, a.body)
	}
	if a := put("reports/a", 90); a.status != 200 {
		t.Errorf("a rewrite to 90 of 100 bytes: %d %v", a.status, a.body)
	}
	if a := put("reports/b", 10); a.status != 200 {
		t.Errorf("exactly 100 of 100 bytes: %d %v", a.status, a.body)
	}
	if a := put("reports/c", 1); a.status != http.StatusInsufficientStorage {
		t.Errorf("101 of 100 bytes: %d %v", a.status, a.body)
	}
}

// Many writers at the edge of the quota at once, with the tokens of two
// jobs that share the scope: exactly the quota is applied, everyone else
// is refused, the scope never holds more.
func TestHandler_QuotaUnderConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*httpstore.Handler)
		body  int
	}{
		{"keys", func(h *httpstore.Handler) { h.QuotaKeys = 5 }, 1},
		{"bytes", func(h *httpstore.Handler) { h.QuotaBytes = 50 }, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, srv := serve(t, storetest.Options{}, tc.tweak)
			sg := mustSigner(t, secret)
			toks := []string{sign(t, sg, 1, 1, "a@x.1", "reports/"), sign(t, sg, 1, 1, "b@x.1", "reports/")}
			const writers = 24
			statuses := make([]int, writers)
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					key := fmt.Sprintf("reports/%d", i)
					statuses[i] = do(t, srv, call{method: "PUT", path: "/api/v1/store/" + key, token: toks[i%2], body: strings.Repeat("x", tc.body)}).status
				})
			}
			wg.Wait()
			count := map[int]int{}
			for _, st := range statuses {
				count[st]++
			}
			metas, err := store.List(context.Background(), "reports/")
			if err != nil {
				t.Fatal(err)
			}
			if len(metas) != 5 || count[http.StatusOK] != 5 || count[http.StatusInsufficientStorage] != writers-5 {
				t.Errorf("statuses %v, %d keys under reports/: want exactly 5 applied, the rest 507", count, len(metas))
			}
		})
	}
}

// blockingStore holds every publish until released, so a test knows a
// body is in flight.
type blockingStore struct {
	fencedstore.Store
	entered chan struct{}
	release chan struct{}
}

func (s *blockingStore) Publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.Publish(ctx, req)
}

// The bodies in flight are bounded: a publish that finds no room within
// BodyWait gets 503 with Retry-After and writes nothing; once the room is
// back, it goes through.
func TestHandler_BoundsBodiesInFlight(t *testing.T) {
	inner, _ := serve(t, storetest.Options{}, nil)
	bs := &blockingStore{Store: inner, entered: make(chan struct{}), release: make(chan struct{})}
	h := &httpstore.Handler{Store: bs, Signer: mustSigner(t, secret), MaxBodyBytes: 1024, MaxBodyBytesInFlight: 1024, BodyWait: 50e6, Logger: quiet}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tok := sign(t, mustSigner(t, secret), 1, 1, "report@x.1", "reports/")
	first := make(chan answer, 1)
	go func() {
		first <- do(t, srv, call{method: "PUT", path: "/api/v1/store/reports/a", token: tok, body: strings.Repeat("a", 1000)})
	}()
	<-bs.entered // 1000 of the 1024 bytes are held until the store decides
	req, _ := http.NewRequest("PUT", srv.URL+"/api/v1/store/reports/b", strings.NewReader(strings.Repeat("b", 100)))
	req.Header.Set("Fencecron-Token", tok)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a body with no room: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// A node's own write (the store credential) has room of its own: a
	// job's token cannot keep workers from publishing.
	nodeDone := make(chan error, 1)
	go func() {
		c := httpstore.NewClient(srv.URL, mustSigner(t, secret))
		c.HTTP = srv.Client()
		_, err := c.Publish(context.Background(), fencedstore.PublishRequest{Key: "reports/node", Token: storetest.T(1, 2), Attempt: "n", Body: make([]byte, 900), Expires: time.Now().Add(time.Hour)})
		nodeDone <- err
	}()
	select {
	case <-bs.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("a node's write found no room while a job's body held the job's")
	}
	close(bs.release)
	if a := <-first; a.status != 200 {
		t.Fatalf("the first publish: %d %v", a.status, a.body)
	}
	if err := <-nodeDone; err != nil {
		t.Errorf("the node's write: %v", err)
	}
	go func() { <-bs.entered }()
	if a := do(t, srv, call{method: "PUT", path: "/api/v1/store/reports/b", token: tok, body: strings.Repeat("b", 100)}); a.status != 200 {
		t.Errorf("the second publish with room again: %d %v", a.status, a.body)
	}
	if _, err := inner.Get(context.Background(), "reports/b"); err != nil {
		t.Errorf("reports/b: %v", err)
	}
}

// BenchmarkHandlerPublishInFullScope measures a job's publish whose scope
// already holds 1000 keys: the quota check counts them on every write.
func BenchmarkHandlerPublishInFullScope(b *testing.B) {
	store, srv := serve(b, storetest.Options{}, nil)
	ctx := context.Background()
	for i := range 1000 {
		if _, err := store.Publish(ctx, fencedstore.PublishRequest{Key: fmt.Sprintf("reports/%04d", i), Token: storetest.T(1, 1), Attempt: "fill", Body: make([]byte, 100)}); err != nil {
			b.Fatal(err)
		}
	}
	sg := mustSigner(b, secret)
	text, err := sg.Sign(fencedstore.SignedToken{Token: storetest.T(2, 1), Attempt: "bench", Scope: fencedstore.Scope{Job: "report", Prefix: "reports/"}, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	job := httpstore.NewClient(srv.URL, nil)
	job.HTTP = srv.Client()
	body := make([]byte, storetest.BenchBodySize)
	b.SetBytes(storetest.BenchBodySize)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := job.PublishSigned(ctx, text, fencedstore.PublishRequest{Key: "reports/0000", Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "publishes/s")
}

// OnRefused hears of every stale_owner and expired refusal of a job's own
// write (no store credential), establish or publish, with the verified
// token and the store's answer; not of applied, established or conflict
// answers, and not of nodes' writes, which their worker reports.
func TestHandler_OnRefused(t *testing.T) {
	type heard struct {
		st  fencedstore.SignedToken
		res fencedstore.Result
	}
	var mu sync.Mutex
	var got []heard
	_, srv := serve(t, storetest.Options{}, func(h *httpstore.Handler) {
		h.OnRefused = func(_ context.Context, st fencedstore.SignedToken, res fencedstore.Result) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, heard{st, res})
		}
	})
	sg := mustSigner(t, secret)
	newer, older := sign(t, sg, 3, 9, "report@x.2", "reports/"), sign(t, sg, 2, 7, "report@x.1", "reports/")
	expired := signExpiring(t, sg, 4, 1, "report@x.3", "reports/", time.Now().Add(-time.Minute))
	bearer := "Bearer " + sg.Credential()
	for _, c := range []struct {
		name   string
		c      call
		status int
	}{
		{"a newer token publishes", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: newer, body: "new"}, 200},
		{"the same token establishes", call{method: "POST", path: "/api/v1/establish/reports/a.csv", token: newer}, 200},
		{"a conflict", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: newer, ifMatch: "7", body: "x"}, 412},
		{"a node's stale publish", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: older, auth: bearer, body: "old"}, 409},
		{"a node's expired publish", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: expired, auth: bearer, body: "x"}, 409},
		{"a job's stale publish", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: older, body: "old"}, 409},
		{"a job's stale establish", call{method: "POST", path: "/api/v1/establish/reports/a.csv", token: older}, 409},
		{"a job's expired publish", call{method: "PUT", path: "/api/v1/store/reports/b.csv", token: expired, body: "x"}, 409},
	} {
		if a := do(t, srv, c.c); a.status != c.status {
			t.Fatalf("%s: status %d (%v), want %d", c.name, a.status, a.body, c.status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		attempt string
		outcome fencedstore.Outcome
		key     string
	}{
		{"report@x.1", fencedstore.StaleOwner, "reports/a.csv"},
		{"report@x.1", fencedstore.StaleOwner, "reports/a.csv"},
		{"report@x.3", fencedstore.Expired, "reports/b.csv"},
	}
	if len(got) != len(want) {
		t.Fatalf("OnRefused heard %d refusals, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		h := got[i]
		if h.st.Attempt != w.attempt || h.res.Outcome != w.outcome || h.res.Key != w.key {
			t.Errorf("refusal %d: attempt %s outcome %s key %s, want %s %s %s", i, h.st.Attempt, h.res.Outcome, h.res.Key, w.attempt, w.outcome, w.key)
		}
	}
	if g := got[0].res.Greatest; g != (fencedstore.Token{Epoch: 3, Seq: 9}) {
		t.Errorf("the stale refusal names greatest %s, want 3.9", g)
	}
}

package httpstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

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

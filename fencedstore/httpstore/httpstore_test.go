package httpstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

// quiet discards the handlers' logs.
var quiet = slog.New(slog.DiscardHandler)

const secret = "httpstore-test-cluster-secret-0123456789"

func mustSigner(t testing.TB, s string) *fencedstore.Signer {
	t.Helper()
	sg, err := fencedstore.NewSigner([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return sg
}

// serve starts a bolt store behind a Handler on a loopback server.
func serve(t testing.TB, o storetest.Options, tweak func(*httpstore.Handler)) (*bolt.Store, *httptest.Server) {
	t.Helper()
	s := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if o.MaxBodyBytes != 0 {
		s.MaxBodyBytes = o.MaxBodyBytes
	}
	if o.HistoryRetention != 0 {
		s.HistoryRetention = o.HistoryRetention
	}
	if o.Now != nil {
		s.Now = o.Now
	}
	if o.KeepVersions != 0 {
		s.KeepVersions = o.KeepVersions
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	h := &httpstore.Handler{Store: s, Signer: mustSigner(t, secret), MaxBodyBytes: s.MaxBodyBytes, Logger: quiet}
	if tweak != nil {
		tweak(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv
}

func newClientWith(t *testing.T, o storetest.Options) fencedstore.Store {
	_, srv := serve(t, o, nil)
	c := httpstore.NewClient(srv.URL, mustSigner(t, secret))
	c.HTTP = srv.Client()
	return c
}

func newClient(t *testing.T) fencedstore.Store { return newClientWith(t, storetest.Options{}) }

// The conformance suite over HTTP: a Client talking to bolt behind a
// Handler passes exactly what bolt passes directly.
func TestClient_Conformance(t *testing.T) {
	storetest.Run(t, newClient)
	storetest.RunLimits(t, newClientWith)
	storetest.RunRetention(t, newRemote)
}

// remote is the store as a node without it sees it: every call over HTTP,
// while retention runs where the store is served (here, on the bolt store
// behind the handler).
type remote struct {
	*httpstore.Client
	fencedstore.Sweeper
}

func newRemote(t *testing.T, o storetest.Options) fencedstore.Store {
	s, srv := serve(t, o, nil)
	c := httpstore.NewClient(srv.URL, mustSigner(t, secret))
	c.HTTP = srv.Client()
	return remote{Client: c, Sweeper: s}
}

// call is one raw write request.
type call struct {
	method, path string
	token, auth  string
	ifMatch      string
	body         string
}

type answer struct {
	status int
	body   map[string]any
	hdr    http.Header
}

func do(t *testing.T, srv *httptest.Server, c call) answer {
	t.Helper()
	req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Fencecron-Token", c.token)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if c.ifMatch != "" {
		req.Header.Set("If-Match", c.ifMatch)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return answer{status: resp.StatusCode, body: m, hdr: resp.Header}
}

// sign signs a job token of job report that expires in an hour.
func sign(t *testing.T, s *fencedstore.Signer, e, q uint64, attempt, prefix string) string {
	t.Helper()
	return signExpiring(t, s, e, q, attempt, prefix, time.Now().Add(time.Hour))
}

func signExpiring(t *testing.T, s *fencedstore.Signer, e, q uint64, attempt, prefix string, expires time.Time) string {
	t.Helper()
	text, err := s.Sign(fencedstore.SignedToken{Token: fencedstore.Token{Epoch: e, Seq: q}, Attempt: attempt, Scope: fencedstore.Scope{Job: "report", Prefix: prefix}, Expires: expires})
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// Every way a write can be refused before the store decides: the right
// status, a message that says what was wrong, and nothing written.
func TestHandler_RefusesBadWrites(t *testing.T) {
	store, srv := serve(t, storetest.Options{MaxBodyBytes: 1024}, nil)
	sg := mustSigner(t, secret)
	other := mustSigner(t, "some-other-cluster-secret-xxxxxxxx")
	good := sign(t, sg, 2, 7, "report@x.1", "reports/")
	bearer := "Bearer " + sg.Credential()
	f := strings.Split(good, ".")
	cases := []struct {
		name   string
		c      call
		status int
		code   string
		says   string
	}{
		{"no token", call{method: "PUT", path: "/api/v1/store/reports/a.csv", body: "x"}, 401, "bad_token", "no Fencecron-Token"},
		{"unsigned token", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: "2.7", body: "x"}, 401, "bad_token", "unsigned"},
		{"malformed token", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: "v2.2.7.x", body: "x"}, 401, "bad_token", "malformed"},
		{"v1 token", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: "v1.2.7." + strings.Join(f[4:], "."), body: "x"}, 401, "bad_token", "carries no expiry"},
		{"forged epoch", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: strings.Replace(good, "v2.2.7.", "v2.999999.7.", 1), body: "x"}, 401, "bad_token", "signature does not match"},
		{"moved expiry", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: strings.Replace(good, "."+f[3]+".", ".253402300799.", 1), body: "x"}, 401, "bad_token", "signature does not match"},
		{"other cluster's token", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: sign(t, other, 2, 7, "a", "reports/"), body: "x"}, 401, "bad_token", "signature does not match"},
		{"mac of another token", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: strings.Join(append(f[:6:6], strings.Split(sign(t, sg, 9, 9, "a", "reports/"), ".")[6]), "."), body: "x"}, 401, "bad_token", "signature"},
		{"wrong credential", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: good, auth: "Bearer nope", body: "x"}, 401, "unauthorized", "credential"},
		{"other cluster's credential", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: good, auth: "Bearer " + other.Credential(), body: "x"}, 401, "unauthorized", "credential"},
		{"out of scope", call{method: "PUT", path: "/api/v1/store/logs/a.txt", token: good, body: "x"}, 403, "out_of_scope", "outside the scope"},
		{"out of scope establish", call{method: "POST", path: "/api/v1/establish/reportsX/a", token: good}, 403, "out_of_scope", "outside"},
		{"empty key", call{method: "PUT", path: "/api/v1/store/", token: good, body: "x"}, 400, "invalid_key", "empty key"},
		{"dot-dot", call{method: "PUT", path: "/api/v1/store/reports/../etc/passwd", token: good, body: "x"}, 400, "invalid_key", `".." segment`},
		{"absolute", call{method: "PUT", path: "/api/v1/store//etc/passwd", token: good, body: "x"}, 400, "invalid_key", "absolute"},
		{"long key", call{method: "PUT", path: "/api/v1/store/reports/" + strings.Repeat("k", 1100), token: good, body: "x"}, 400, "invalid_key", "longer than 1024"},
		{"NUL in key", call{method: "PUT", path: "/api/v1/store/reports/a%00b", token: good, body: "x"}, 400, "invalid_key", "control"},
		{"body over the cap", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: good, body: strings.Repeat("x", 1025)}, 413, "too_large", "1025 bytes; the cap is 1024 bytes (store.max_body_bytes)"},
		{"bad If-Match", call{method: "PUT", path: "/api/v1/store/reports/a.csv", token: good, ifMatch: "abc", body: "x"}, 400, "bad_request", "If-Match"},
		{"wrong method", call{method: "DELETE", path: "/api/v1/store/reports/a.csv", token: good}, 405, "method_not_allowed", "DELETE"},
		{"unknown path", call{method: "GET", path: "/api/v1/nothing"}, 404, "not_found", "/api/v1/nothing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, srv, tc.c)
			if a.status != tc.status || a.body["code"] != tc.code {
				t.Fatalf("status %d code %v (%v), want %d %s", a.status, a.body["code"], a.body["error"], tc.status, tc.code)
			}
			if msg, _ := a.body["error"].(string); !strings.Contains(msg, tc.says) {
				t.Errorf("error %q does not say %q", msg, tc.says)
			}
		})
	}
	metas, err := store.List(context.Background(), "")
	if err != nil || len(metas) != 0 {
		t.Fatalf("refused writes left keys: %+v, %v", metas, err)
	}

	// A body over the cap sent without a Content-Length (chunked).
	req, _ := http.NewRequest("PUT", srv.URL+"/api/v1/store/reports/a.csv", io.MultiReader(strings.NewReader(strings.Repeat("y", 2000))))
	req.Header.Set("Fencecron-Token", good)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("chunked body over the cap: status %d, want 413", resp.StatusCode)
	}
	if metas, _ := store.List(context.Background(), ""); len(metas) != 0 {
		t.Fatalf("an oversized chunked body was written: %+v", metas)
	}
	_ = bearer
}

// The decisions over raw HTTP: a job's process with only its token, a node
// with token and credential; 200, 409 and 412 with the outcome and greatest
// token in the JSON body.
func TestHandler_Decisions(t *testing.T) {
	_, srv := serve(t, storetest.Options{}, nil)
	sg := mustSigner(t, secret)
	bearer := "Bearer " + sg.Credential()
	w1 := sign(t, sg, 1, 10, "report@x.1", "reports/")
	w2 := sign(t, sg, 2, 14, "report@x.2", "reports/")
	const path = "/api/v1/store/reports/2026-07.csv"

	check := func(a answer, status int, outcome string, version float64, greatest string) {
		t.Helper()
		if a.status != status || a.body["outcome"] != outcome || a.body["version"] != version {
			t.Fatalf("answer %d %v, want %d %s version %v", a.status, a.body, status, outcome, version)
		}
		g := a.body["greatest"].(map[string]any)
		if got := fmtTok(g); got != greatest {
			t.Errorf("greatest %s, want %s", got, greatest)
		}
		if a.hdr.Get("Fencecron-Greatest") != greatest {
			t.Errorf("Fencecron-Greatest header %q, want %s", a.hdr.Get("Fencecron-Greatest"), greatest)
		}
	}
	check(do(t, srv, call{method: "POST", path: "/api/v1/establish/reports/2026-07.csv", token: w1}), 200, "established", 0, "1.10")
	check(do(t, srv, call{method: "POST", path: "/api/v1/establish/reports/2026-07.csv", token: w2, auth: bearer}), 200, "established", 0, "2.14")
	check(do(t, srv, call{method: "PUT", path: path, token: w2, body: "fresh"}), 200, "applied", 1, "2.14")
	stale := do(t, srv, call{method: "PUT", path: path, token: w1, body: "stale"})
	check(stale, 409, "stale_owner", 1, "2.14")
	if msg, _ := stale.body["error"].(string); !strings.Contains(msg, "stale_owner") {
		t.Errorf("stale answer's error %q does not name stale_owner", msg)
	}
	check(do(t, srv, call{method: "PUT", path: path, token: w2, ifMatch: `"0"`, body: "other"}), 412, "conflict", 1, "2.14")
	check(do(t, srv, call{method: "PUT", path: path, token: w2, ifMatch: "1", auth: bearer, body: "second"}), 200, "applied", 2, "2.14")

	// The body and its state.
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "second" || resp.Header.Get("ETag") != `"2"` || resp.Header.Get("Fencecron-Token") != "2.14" || resp.Header.Get("Fencecron-Attempt") != "report@x.2" {
		t.Errorf("GET = %q, headers %v", b, resp.Header)
	}
	// The history names every decision, with the attempt from the token.
	var hist struct{ Decisions []fencedstore.Decision }
	resp, err = srv.Client().Get(srv.URL + "/api/v1/history/reports/2026-07.csv")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&hist)
	resp.Body.Close()
	var outcomes []string
	for _, d := range hist.Decisions {
		outcomes = append(outcomes, string(d.Outcome)+"/"+d.Attempt)
	}
	want := "established/report@x.1 established/report@x.2 applied/report@x.2 stale_owner/report@x.1 conflict/report@x.2 applied/report@x.2"
	if got := strings.Join(outcomes, " "); got != want {
		t.Errorf("history = %s, want %s", got, want)
	}
}

func fmtTok(m map[string]any) string {
	tok := fencedstore.Token{Epoch: uint64(m["epoch"].(float64)), Seq: uint64(m["seq"].(float64))}
	return tok.String()
}

// With RequireCredential, a job's bare token is not enough.
func TestHandler_RequireCredential(t *testing.T) {
	_, srv := serve(t, storetest.Options{}, func(h *httpstore.Handler) { h.RequireCredential = true })
	sg := mustSigner(t, secret)
	tok := sign(t, sg, 1, 1, "a", "k")
	if a := do(t, srv, call{method: "PUT", path: "/api/v1/store/k", token: tok, body: "x"}); a.status != 401 {
		t.Errorf("token without credential: %d %v, want 401", a.status, a.body)
	}
	if a := do(t, srv, call{method: "PUT", path: "/api/v1/store/k", token: tok, auth: "Bearer " + sg.Credential(), body: "x"}); a.status != 200 {
		t.Errorf("token with credential: %d %v, want 200", a.status, a.body)
	}
}

// A handler without a signer serves reads and refuses every write.
func TestHandler_ReadOnlyWithoutSigner(t *testing.T) {
	_, srv := serve(t, storetest.Options{}, func(h *httpstore.Handler) { h.Signer = nil })
	tok := sign(t, mustSigner(t, secret), 1, 1, "a", "k")
	if a := do(t, srv, call{method: "PUT", path: "/api/v1/store/k", token: tok, body: "x"}); a.status != 403 || a.body["code"] != "writes_disabled" {
		t.Errorf("write without a signer: %d %v, want 403 writes_disabled", a.status, a.body)
	}
	if a := do(t, srv, call{method: "GET", path: "/api/v1/store?prefix="}); a.status != 200 {
		t.Errorf("list without a signer: %d", a.status)
	}
}

// A handler whose writes are off says why, naming the setting, to a job's
// write and to a node's floor alike; reads stay open.
func TestHandler_WritesOffSaysWhy(t *testing.T) {
	const why = "this node does not serve its store (store.serve is false)"
	_, srv := serve(t, storetest.Options{}, func(h *httpstore.Handler) { h.WritesOff = why })
	sg := mustSigner(t, secret)
	for _, c := range []call{
		{method: "PUT", path: "/api/v1/store/k", token: sign(t, sg, 1, 1, "a", "k"), body: "x"},
		{method: "POST", path: "/api/v1/floor", auth: "Bearer " + sg.Credential(), body: `{"job": "report", "token": {"epoch": 1, "seq": 1}}`},
	} {
		a := do(t, srv, c)
		if msg, _ := a.body["error"].(string); a.status != 403 || a.body["code"] != "writes_disabled" || msg != "writes disabled: "+why {
			t.Errorf("%s %s with writes off: %d %v, want 403 naming the setting", c.method, c.path, a.status, a.body)
		}
	}
	if a := do(t, srv, call{method: "GET", path: "/api/v1/store?prefix="}); a.status != 200 {
		t.Errorf("list with writes off: %d", a.status)
	}
}

// unavailableStore fails every call as a database that is down would.
type unavailableStore struct{ fencedstore.Store }

func (unavailableStore) Publish(context.Context, fencedstore.PublishRequest) (fencedstore.Result, error) {
	return fencedstore.Result{}, errors.Join(fencedstore.ErrUnavailable, errors.New("postgres at db:5432: connection refused"))
}

func (unavailableStore) Get(context.Context, string) (fencedstore.Object, error) {
	return fencedstore.Object{}, errors.Join(fencedstore.ErrUnavailable, errors.New("connection refused"))
}

// A backend that is down is 503 with a clear message, and the client turns
// it back into ErrUnavailable; a server that is gone is ErrUnavailable too.
func TestClient_Unavailable(t *testing.T) {
	sg := mustSigner(t, secret)
	srv := httptest.NewServer(&httpstore.Handler{Store: unavailableStore{}, Signer: sg, Logger: quiet})
	defer srv.Close()
	a := do(t, srv, call{method: "PUT", path: "/api/v1/store/k", token: sign(t, sg, 1, 1, "a", "k"), body: "x"})
	if a.status != 503 || a.body["code"] != "unavailable" || !strings.Contains(a.body["error"].(string), "connection refused") {
		t.Errorf("backend down: %d %v, want 503 unavailable", a.status, a.body)
	}
	c := httpstore.NewClient(srv.URL, sg)
	_, err := c.Publish(context.Background(), fencedstore.PublishRequest{Key: "k", Token: storetest.T(1, 1), Attempt: "a", Body: []byte("x")})
	if !errors.Is(err, fencedstore.ErrUnavailable) {
		t.Errorf("client publish with the backend down: err = %v, want ErrUnavailable", err)
	}
	srv.Close()
	if _, err := c.Get(context.Background(), "k"); !errors.Is(err, fencedstore.ErrUnavailable) {
		t.Errorf("client get with the server gone: err = %v, want ErrUnavailable", err)
	}
}

// A job's process: PublishSigned with only the token it was given.
func TestClient_PublishSignedAsAJob(t *testing.T) {
	store, srv := serve(t, storetest.Options{}, nil)
	sg := mustSigner(t, secret)
	job := httpstore.NewClient(strings.TrimPrefix(srv.URL, "http://"), nil) // host:port, no secret
	tok := sign(t, sg, 3, 30, "report@y.1", "reports/")
	ctx := context.Background()
	for _, k := range []string{"reports/a.csv", "reports/sub/b.csv", "reports/with space %.csv"} {
		res, err := job.PublishSigned(ctx, tok, fencedstore.PublishRequest{Key: k, Body: []byte("body of " + k)})
		if err != nil || res.Outcome != fencedstore.Applied {
			t.Fatalf("publish %s: %+v, %v", k, res, err)
		}
		obj, err := store.Get(ctx, k)
		if err != nil || !bytes.Equal(obj.Body, []byte("body of "+k)) || obj.Attempt != "report@y.1" || obj.Token != storetest.T(3, 30) {
			t.Fatalf("stored %s: %+v %q, %v", k, obj.Meta, obj.Body, err)
		}
	}
	if _, err := job.PublishSigned(ctx, tok, fencedstore.PublishRequest{Key: "logs/x", Body: []byte("x")}); !errors.Is(err, fencedstore.ErrOutOfScope) {
		t.Errorf("publish outside the scope: err = %v, want ErrOutOfScope", err)
	}
	// Through the Store interface a client without a secret cannot sign.
	if _, err := job.Publish(ctx, fencedstore.PublishRequest{Key: "reports/a.csv", Token: storetest.T(9, 9), Body: []byte("x")}); !errors.Is(err, fencedstore.ErrUnauthorized) {
		t.Errorf("unsigned Store.Publish: err = %v, want ErrUnauthorized", err)
	}
}

func BenchmarkClientPublish1KiB(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := map[bool]string{false: "sequential", true: "parallel"}[parallel]
		b.Run(name, func(b *testing.B) {
			_, srv := serve(b, storetest.Options{}, nil)
			c := httpstore.NewClient(srv.URL, mustSigner(b, secret))
			c.HTTP = srv.Client()
			storetest.BenchPublish(b, c, parallel, 32)
		})
	}
}

// The attack of issue 11: a superseded attempt's token, whose expiry has
// passed, publishes to a key no newer attempt ever touched. Fencing is per
// key, so only the expiry stops it: 409 expired, recorded in that key's
// history, nothing written; and the Client turns it into ErrExpired with a
// filled-in Result.
func TestHandler_ExpiredToken(t *testing.T) {
	now := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	store, srv := serve(t, storetest.Options{Now: func() time.Time { return now }}, nil)
	sg := mustSigner(t, secret)
	old := signExpiring(t, sg, 1, 10, "report@x.1", "reports/", now.Add(-time.Second))
	cur := signExpiring(t, sg, 2, 14, "report@x.2", "reports/", now.Add(time.Hour))
	ctx := context.Background()

	if a := do(t, srv, call{method: "PUT", path: "/api/v1/store/reports/2026-07.csv", token: cur, body: "fresh"}); a.status != 200 {
		t.Fatalf("publish with a live token: %d %v", a.status, a.body)
	}
	for _, c := range []call{
		{method: "PUT", path: "/api/v1/store/reports/never-written.csv", token: old, body: "stale"},
		{method: "POST", path: "/api/v1/establish/reports/never-established.csv", token: old},
		{method: "PUT", path: "/api/v1/store/reports/2026-07.csv", token: old, body: "stale"},
	} {
		a := do(t, srv, c)
		if a.status != 409 || a.body["outcome"] != "expired" {
			t.Fatalf("%s %s with an expired token: %d %v, want 409 expired", c.method, c.path, a.status, a.body)
		}
		if msg, _ := a.body["error"].(string); !strings.Contains(msg, "expired") {
			t.Errorf("the answer's error %q does not say expired", msg)
		}
	}
	for key, wantVersion := range map[string]uint64{"reports/never-written.csv": 0, "reports/never-established.csv": 0, "reports/2026-07.csv": 1} {
		h, err := store.History(ctx, key)
		if err != nil {
			t.Fatalf("history %s: %v", key, err)
		}
		last := h[len(h)-1]
		if last.Outcome != fencedstore.Expired || last.Attempt != "report@x.1" || !last.Expires.Equal(now.Add(-time.Second)) || last.Version != wantVersion {
			t.Errorf("history %s ends with %+v, want expired by report@x.1 expiring a second ago at version %d", key, last, wantVersion)
		}
	}
	if _, err := store.Get(ctx, "reports/never-written.csv"); !errors.Is(err, fencedstore.ErrNotFound) {
		t.Errorf("the expired publish left a body: err = %v", err)
	}
	if obj, err := store.Get(ctx, "reports/2026-07.csv"); err != nil || string(obj.Body) != "fresh" || obj.Greatest != storetest.T(2, 14) {
		t.Errorf("the expired publish changed the live key: %+v %q, %v", obj.Meta, obj.Body, err)
	}

	job := httpstore.NewClient(srv.URL, nil)
	job.HTTP = srv.Client()
	res, err := job.PublishSigned(ctx, old, fencedstore.PublishRequest{Key: "reports/other.csv", Body: []byte("x")})
	if !errors.Is(err, fencedstore.ErrExpired) || res.Outcome != fencedstore.Expired || res.Key != "reports/other.csv" {
		t.Errorf("client publish with an expired token: %+v, %v; want ErrExpired with the result", res, err)
	}
	if _, err := job.EstablishSigned(ctx, "reports/other.csv", old); !errors.Is(err, fencedstore.ErrExpired) {
		t.Errorf("client establish with an expired token: err = %v, want ErrExpired", err)
	}
	// A node's own call: the Client signs the request's expiry into its
	// per-key token.
	node := httpstore.NewClient(srv.URL, sg)
	node.HTTP = srv.Client()
	if _, err := node.Publish(ctx, fencedstore.PublishRequest{Key: "reports/node.csv", Token: storetest.T(3, 1), Attempt: "report@y.1", Body: []byte("x"), Expires: now.Add(-time.Minute)}); !errors.Is(err, fencedstore.ErrExpired) {
		t.Errorf("node publish with an expired request: err = %v, want ErrExpired", err)
	}
	if _, err := node.Publish(ctx, fencedstore.PublishRequest{Key: "reports/node.csv", Token: storetest.T(3, 1), Attempt: "report@y.1", Body: []byte("x"), Expires: now.Add(time.Minute)}); err != nil {
		t.Errorf("node publish with a live request: %v", err)
	}
}

// GET /api/v1/store pages with an opaque cursor; the answer of a small
// store is the one it always was (every key, no next); bad cursors,
// limits and versions are 400, a version not kept is 404 saying which are.
func TestHandler_ListPagesAndVersions(t *testing.T) {
	s, srv := serve(t, storetest.Options{KeepVersions: 2}, nil)
	ctx := context.Background()
	for i := uint64(1); i <= 5; i++ {
		if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "r/" + string(rune('a'+i)), Token: storetest.T(1, i), Attempt: "a", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint64(6); i <= 8; i++ {
		if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "r/b", Token: storetest.T(1, i), Attempt: "a", Body: []byte{byte('0' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) (int, map[string]any, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(b, &m)
		return resp.StatusCode, m, string(b)
	}
	code, all, _ := get("/api/v1/store?prefix=r/")
	if keys, _ := all["keys"].([]any); code != 200 || len(keys) != 5 || all["next"] != nil {
		t.Fatalf("small listing: %d %v; want all 5 keys and no next", code, all)
	}
	var got []string
	cursor := ""
	for range 10 {
		_, page, _ := get("/api/v1/store?prefix=r/&limit=2&cursor=" + cursor)
		for _, k := range page["keys"].([]any) {
			got = append(got, k.(map[string]any)["key"].(string))
		}
		next, _ := page["next"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if strings.Join(got, " ") != "r/b r/c r/d r/e r/f" {
		t.Errorf("paged listing = %v", got)
	}
	for _, bad := range []string{"?prefix=r/&cursor=nonsense", "?prefix=q/&cursor=" + fencedstore.EncodeCursor("r/", "r/b"), "?limit=0", "?limit=x"} {
		if code, _, body := get("/api/v1/store" + bad); code != 400 {
			t.Errorf("GET /api/v1/store%s = %d %s, want 400", bad, code, body)
		}
	}
	if code, _, body := get("/api/v1/store/r/b?version=3"); code != 200 || body != "7" {
		t.Errorf("version 3 = %d %q, want the body of the second publish", code, body)
	}
	if code, _, body := get("/api/v1/store/r/b?version=2"); code != 404 || !strings.Contains(body, "versions 3, 4") {
		t.Errorf("version 2 = %d %s; want 404 naming the kept versions 3, 4", code, body)
	}
	if code, _, _ := get("/api/v1/store/r/b?version=x"); code != 400 {
		t.Errorf("version x = %d, want 400", code)
	}
}

// Only a node raises a job's floor: POST /api/v1/floor takes the store
// credential, and a job's own token (which could otherwise revoke other
// jobs' tokens) or a wrong credential is 401. Once raised, the job's own
// publish with its token is 409 stale_owner naming the floor, and the
// client says it was revoked.
func TestHandler_Floor(t *testing.T) {
	_, srv := serve(t, storetest.Options{}, nil)
	sg := mustSigner(t, secret)
	tok := sign(t, sg, 2, 5, "report@x.1", "reports/")
	body := `{"job": "report", "token": {"epoch": 2, "seq": 5}}`
	for _, c := range []call{
		{method: "POST", path: "/api/v1/floor", token: tok, body: body},
		{method: "POST", path: "/api/v1/floor", auth: "Bearer " + mustSigner(t, "another-cluster-secret-0123456789abcdef").Credential(), body: body},
	} {
		if a := do(t, srv, c); a.status != 401 {
			t.Errorf("raise a floor without the store credential (token %v, auth %q): %d %v, want 401", c.token != "", c.auth, a.status, a.body)
		}
	}
	if a := do(t, srv, call{method: "POST", path: "/api/v1/floor", auth: "Bearer " + sg.Credential(), body: `{"job": ""}`}); a.status != 400 {
		t.Errorf("raise the floor of no job: %d %v, want 400", a.status, a.body)
	}
	job := httpstore.NewClient(srv.URL, nil)
	job.HTTP = srv.Client()
	ctx := context.Background()
	if _, err := job.PublishSigned(ctx, tok, fencedstore.PublishRequest{Key: "reports/a.csv", Body: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	if _, err := job.RaiseFloor(ctx, "report", storetest.T(2, 5)); !errors.Is(err, fencedstore.ErrUnauthorized) {
		t.Errorf("a client without the secret raises a floor: err = %v, want ErrUnauthorized", err)
	}
	node := httpstore.NewClient(srv.URL, sg)
	node.HTTP = srv.Client()
	if floor, err := node.RaiseFloor(ctx, "report", storetest.T(2, 5)); err != nil || floor != storetest.T(2, 5) {
		t.Fatalf("a node raises the floor: %s, %v", floor, err)
	}
	a := do(t, srv, call{method: "PUT", path: "/api/v1/store/reports/b.csv", token: tok, body: "after"})
	if msg, _ := a.body["error"].(string); a.status != 409 || a.body["outcome"] != "stale_owner" || a.body["floor"] == nil || fmtTok(a.body["floor"].(map[string]any)) != "2.5" || !strings.Contains(msg, "revoked") {
		t.Errorf("the job's publish after the floor: %d %v, want 409 stale_owner naming floor 2.5", a.status, a.body)
	}
	_, err := job.PublishSigned(ctx, tok, fencedstore.PublishRequest{Key: "reports/a.csv", Body: []byte("after")})
	var rev *fencedstore.RevokedError
	if !errors.As(err, &rev) || rev.Floor != storetest.T(2, 5) || !errors.Is(err, fencedstore.ErrStaleOwner) {
		t.Errorf("the client's error: %v, want RevokedError at 2.5 wrapping ErrStaleOwner", err)
	}
}

// A token of namespace billing cannot write under another namespace's
// keys, nor the default namespace's, even when its prefix claims them;
// under its own it writes.
func TestHandler_NamespaceScope(t *testing.T) {
	store, srv := serve(t, storetest.Options{}, nil)
	sg := mustSigner(t, secret)
	job := httpstore.NewClient(strings.TrimPrefix(srv.URL, "http://"), nil)
	signAs := func(jobName, prefix string) string {
		t.Helper()
		text, err := sg.Sign(fencedstore.SignedToken{Token: fencedstore.Token{Epoch: 2, Seq: 5}, Attempt: jobName + "@x.1", Scope: fencedstore.Scope{Job: jobName, Prefix: prefix}, Expires: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	ctx := context.Background()
	own := signAs("billing:report", "ns/billing/reports/")
	if res, err := job.PublishSigned(ctx, own, fencedstore.PublishRequest{Key: "ns/billing/reports/a.csv", Body: []byte("a")}); err != nil || res.Outcome != fencedstore.Applied {
		t.Fatalf("publish in its own namespace: %+v, %v", res, err)
	}
	for _, tc := range []struct{ name, tok, key string }{
		{"other namespace", own, "ns/sales/reports/a.csv"},
		{"wide prefix into another namespace", signAs("billing:report", "ns/"), "ns/sales/reports/a.csv"},
		{"default namespace's key", signAs("billing:report", "reports/"), "reports/a.csv"},
		{"default job into a namespace", signAs("report", "ns/"), "ns/billing/reports/b.csv"},
	} {
		if _, err := job.PublishSigned(ctx, tc.tok, fencedstore.PublishRequest{Key: tc.key, Body: []byte("x")}); !errors.Is(err, fencedstore.ErrOutOfScope) {
			t.Errorf("%s: publish %s: err = %v, want ErrOutOfScope", tc.name, tc.key, err)
		}
		if _, err := store.Get(ctx, tc.key); err == nil {
			t.Errorf("%s: %s was written", tc.name, tc.key)
		}
	}
}

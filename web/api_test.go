package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/rpc"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/auth"
)

func (f *fixture) do(t testing.TB, method, path, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// The JSON API keeps its paths and shapes.
func TestServer_API(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		path string
		code int
		want []string
	}{
		{"/api/v1/status", 200, []string{`"node": "n2"`, `"leader": "n2"`, `"epoch": 4`, `"name": "w1"`, `"drifted": true`}},
		{"/api/v1/jobs", 200, []string{`"name": "report"`, `"next_fire": "2026-09-01T09:00:00+02:00"`, `"last_run"`}},
		{"/api/v1/jobs/heartbeat", 200, []string{`"paused": true`}},
		{"/api/v1/jobs/nope", 404, []string{`"error": "job \"nope\": not found"`, `"code": "not_found"`}},
		{"/api/v1/nope", 404, []string{`"code": "no_route"`}},
		{"/api/v1/runs?job=report", 200, []string{`"id": "report@20260801T090000Z"`, `"epoch": 3`, `"store_outcome": "stale_owner"`}},
		{"/api/v1/runs?limit=0", 400, []string{`limit must be a number from 1 to 10000`}},
		{"/api/v1/events?after=9", 200, []string{`"seq": 10`, `"seq": 11`, `"stale_refused": 1`}},
		{"/api/v1/events?after=x", 400, []string{`after must be an event sequence number`}},
		{"/api/v1/runs?state=failed", 200, []string{`"id": "heartbeat@20260801T085930Z"`, `"next": ""`}},
		{"/api/v1/runs?state=sleeping", 400, []string{`state \"sleeping\": want one of pending`, `"code": "bad_request"`}},
		{"/api/v1/runs?since=yesterday", 400, []string{`since must be an RFC 3339 time`}},
		{"/api/v1/runs?since=-1h", 400, []string{`since must be an RFC 3339 time`}},
		{"/api/v1/runs?until=soon", 400, []string{`until must be an RFC 3339 time`}},
		{"/api/v1/runs?since=2026-08-02T00:00:00Z&until=2026-08-01T00:00:00Z", 400, []string{`since (2026-08-02T00:00:00Z) must be before until`}},
		{"/api/v1/runs?cursor=nope!", 400, []string{`"code": "bad_cursor"`}},
		{"/api/v1/runs?since=2026-08-01T09:00:00Z", 200, []string{`"id": "report@20260801T090000Z"`}},
		{"/api/v1/runs?limit=10001", 400, []string{`limit must be a number from 1 to 10000`}},
		{"/api/v1/events?kind=fenced", 200, []string{`"kind": "fenced"`, `"next": ""`}},
		{"/api/v1/events?limit=5001", 400, []string{`limit must be a number from 1 to 5000`}},
		{"/api/v1/events?cursor=x", 400, []string{`"code": "bad_cursor"`}},
		{"/api/v1/jobset", 200, []string{`"hash":"abc"`}},
		{"/api/v1/store?prefix=reports/", 200, []string{`"key": "reports/2026-07.csv"`}},
		{"/api/v1/history/reports/2026-07.csv", 200, []string{`"outcome": "stale_owner"`}},
		{"/api/v1/skips?job=heartbeat", 200, []string{`"reason": "paused"`, `"count": 2`}},
		{"/internal/v1/renew", 401, []string{"nodes of this cluster", `"code":"unauthorized"`}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, hdr, body := f.do(t, http.MethodGet, tt.path, "")
			if code != tt.code {
				t.Fatalf("GET %s = %d, want %d\n%s", tt.path, code, tt.code, body)
			}
			if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("content type %q", ct)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s lacks %q:\n%.800s", tt.path, w, body)
				}
			}
		})
	}
	// Events without Accept: text/event-stream stay JSON.
	var ev struct{ Events []jobs.Event }
	_, _, body := f.do(t, http.MethodGet, "/api/v1/events", "")
	if err := json.Unmarshal([]byte(body), &ev); err != nil || len(ev.Events) != 11 {
		t.Errorf("events JSON: %d events, %v", len(ev.Events), err)
	}
}

// Runs and events page with the cursor their answers carry: each once,
// newest first for runs; events newest page first, each page in order.
func TestServer_APIPages(t *testing.T) {
	f := newFixture(t)
	var runs []string
	cursor := ""
	for range 10 {
		var page struct {
			Runs []jobs.Run
			Next string
		}
		_, _, body := f.do(t, http.MethodGet, "/api/v1/runs?limit=1&cursor="+url.QueryEscape(cursor), "")
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			runs = append(runs, r.ID)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if got, want := strings.Join(runs, " "), "report@20260801T090000Z heartbeat@20260801T085930Z"; got != want {
		t.Errorf("runs paged: %s, want %s", got, want)
	}
	var seqs []uint64
	cursor = ""
	for range 20 {
		var page struct {
			Events []jobs.Event
			Next   string
		}
		_, _, body := f.do(t, http.MethodGet, "/api/v1/events?limit=4&cursor="+url.QueryEscape(cursor), "")
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		var these []uint64
		for _, e := range page.Events {
			these = append(these, e.Seq)
		}
		seqs = append(these, seqs...)
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if len(seqs) != 11 || seqs[0] != 1 || seqs[10] != 11 {
		t.Errorf("events paged: %v, want 1 to 11", seqs)
	}
}

// Who may act: read-only refuses everyone; a token admits a bearer or a
// logged-in browser that echoes its CSRF token; cross-site requests are
// refused always; without a token anyone same-origin may act.
func TestServer_Auth(t *testing.T) {
	const token = "the-api-token-0123456789"
	open := newFixture(t)
	ro := newFixture(t, func(s *Server) { s.ReadOnly = true; s.APIToken = token })
	guarded := newFixture(t, func(s *Server) { s.APIToken = token })

	// Log in to the guarded node: a session cookie and its CSRF token.
	code, hdr, body := guarded.do(t, http.MethodPost, "/login", url.Values{"token": {token}, "next": {"/jobs"}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded")
	if code != http.StatusSeeOther || hdr.Get("Location") != "/jobs" {
		t.Fatalf("login = %d to %q\n%s", code, hdr.Get("Location"), body)
	}
	cookie := hdr.Get("Set-Cookie")
	if !strings.Contains(cookie, auth.SessionCookie+"=") || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("session cookie = %q", cookie)
	}
	cookie = strings.SplitN(cookie, ";", 2)[0]
	_, _, page := guarded.do(t, http.MethodGet, "/jobs", "", "Cookie", cookie)
	i := strings.Index(page, `data-csrf="`)
	if i < 0 {
		t.Fatalf("logged-in page has no CSRF token")
	}
	csrf := page[i+len(`data-csrf="`):][:32]
	if !strings.Contains(page, `action="/api/v1/jobs/report/trigger"`) || !strings.Contains(page, `name="csrf" value="`+csrf+`"`) {
		t.Errorf("logged-in page lacks its buttons with the CSRF token")
	}
	if _, _, anon := guarded.do(t, http.MethodGet, "/jobs", ""); strings.Contains(anon, `data-action="trigger"`) || !strings.Contains(anon, "log in to act") {
		t.Errorf("anonymous page on a guarded node shows buttons")
	}
	if _, _, roPage := ro.do(t, http.MethodGet, "/jobs", ""); strings.Contains(roPage, `data-action="trigger"`) || !strings.Contains(roPage, `<span class="badge">read-only</span>`) {
		t.Errorf("read-only page shows buttons")
	}

	form := "application/x-www-form-urlencoded"
	tests := []struct {
		name   string
		f      *fixture
		method string
		path   string
		body   string
		header []string
		code   int
		msg    string
	}{
		{"open: anyone", open, "POST", "/api/v1/jobs/report/trigger", "", nil, 200, `"id": "report@manual"`},
		{"open: cross-site refused", open, "POST", "/api/v1/jobs/report/trigger", "", []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-origin"},
		{"open: foreign origin refused", open, "POST", "/api/v1/jobs/report/pause", "", []string{"Origin", "https://evil.example"}, 403, "cross-origin"},
		{"open: unknown job", open, "POST", "/api/v1/jobs/nope/trigger", "", nil, 400, "unknown job"},
		{"open: GET on an action", open, "GET", "/api/v1/jobs/report/trigger", "", nil, 405, "GET is not allowed"},
		{"read-only: even with the token", ro, "POST", "/api/v1/jobs/report/trigger", "", []string{"Authorization", "Bearer " + token}, 403, "read-only"},
		{"read-only: jobset", ro, "PUT", "/api/v1/jobset", `{"jobs":[]}`, []string{"Authorization", "Bearer " + token}, 403, "read-only"},
		{"guarded: nothing", guarded, "POST", "/api/v1/jobs/report/trigger", "", nil, 401, "needs the API token"},
		{"guarded: wrong bearer", guarded, "POST", "/api/v1/jobs/report/pause", "", []string{"Authorization", "Bearer nope"}, 401, "wrong API token"},
		{"guarded: basic auth", guarded, "POST", "/api/v1/jobs/report/pause", "", []string{"Authorization", "Basic eDp5"}, 401, "wrong API token"},
		{"guarded: bearer", guarded, "POST", "/api/v1/jobs/report/pause", "", []string{"Authorization", "Bearer " + token}, 200, `"paused": true`},
		{"guarded: bearer jobset", guarded, "PUT", "/api/v1/jobset", `{"source":"t","jobs":[]}`, []string{"Authorization", "Bearer " + token}, 200, `"hash": "newhash"`},
		{"guarded: bad jobset", guarded, "PUT", "/api/v1/jobset", `{"jobz":[]}`, []string{"Authorization", "Bearer " + token}, 400, "unknown field"},
		{"guarded: jobset counted", guarded, "PUT", "/api/v1/jobset", `{"source":"t","jobs":[]}`, []string{"Authorization", "Bearer " + token, wire.JobCountHeader, "3"}, 200, `"hash": "newhash"`},
		{"guarded: bad jobset counted", guarded, "PUT", "/api/v1/jobset", `{"jobz":[]}`, []string{"Authorization", "Bearer " + token, wire.JobCountHeader, "1"}, 400, "unknown field"},
		{"guarded: session without CSRF", guarded, "POST", "/api/v1/jobs/report/resume", "", []string{"Cookie", cookie}, 403, "CSRF"},
		{"guarded: session, wrong CSRF", guarded, "POST", "/api/v1/jobs/report/resume", "", []string{"Cookie", cookie, auth.CSRFHeader, strings.Repeat("0", 32)}, 403, "CSRF"},
		{"guarded: session and CSRF header", guarded, "POST", "/api/v1/jobs/report/resume", "", []string{"Cookie", cookie, auth.CSRFHeader, csrf}, 200, `"paused": false`},
		{"guarded: session, CSRF, but cross-site", guarded, "POST", "/api/v1/jobs/report/resume", "", []string{"Cookie", cookie, auth.CSRFHeader, csrf, "Sec-Fetch-Site", "cross-site"}, 403, "cross-origin"},
		{"guarded: forged cookie", guarded, "POST", "/api/v1/jobs/report/resume", "", []string{"Cookie", auth.SessionCookie + "=aa.9999999999.bb", auth.CSRFHeader, csrf}, 401, "needs the API token"},
		{"guarded: form without script", guarded, "POST", "/api/v1/jobs/report/trigger", url.Values{"csrf": {csrf}, "back": {"/jobs/report"}}.Encode(),
			[]string{"Cookie", cookie, "Content-Type", form, "Accept", "text/html"}, 303, ""},
		{"guarded: form, off-site back", guarded, "POST", "/api/v1/jobs/report/trigger", url.Values{"csrf": {csrf}, "back": {"//evil.example/"}}.Encode(),
			[]string{"Cookie", cookie, "Content-Type", form, "Accept", "text/html"}, 303, ""},
		{"guarded: form without CSRF gets a page", guarded, "POST", "/api/v1/jobs/report/trigger", "back=/jobs",
			[]string{"Cookie", cookie, "Content-Type", form, "Accept", "text/html"}, 403, `<p class="error-text" id="error-message">forbidden: missing or wrong CSRF token`},
		{"guarded: wrong login", guarded, "POST", "/login", "token=nope", []string{"Content-Type", form}, 401, "wrong token"},
		{"guarded: cross-site login", guarded, "POST", "/login", "token=" + token, []string{"Content-Type", form, "Sec-Fetch-Site", "cross-site"}, 403, "another site"},
		{"open: login", open, "POST", "/login", "token=x", []string{"Content-Type", form}, 400, "nothing to log in to"},
		{"internal API ignores the API token", guarded, "POST", "/internal/v1/trigger", `{"job":"report"}`, []string{"Authorization", "Bearer " + token}, 401, "nodes of this cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := tt.f.do(t, tt.method, tt.path, tt.body, tt.header...)
			if code != tt.code {
				t.Fatalf("%s %s = %d, want %d\n%s", tt.method, tt.path, code, tt.code, body)
			}
			if !strings.Contains(body, tt.msg) {
				t.Errorf("answer lacks %q:\n%s", tt.msg, body)
			}
			if code == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if code == 303 {
				if loc := hdr.Get("Location"); loc != "/jobs/report" && loc != "/" {
					t.Errorf("redirect to %q", loc)
				}
			}
		})
	}
	if got := strings.Join(open.sched.Calls(), ","); got != "trigger report,trigger nope" {
		t.Errorf("open node's scheduler saw %q", got)
	}
	if got := strings.Join(ro.sched.Calls(), ","); got != "" {
		t.Errorf("read-only node's scheduler saw %q", got)
	}
	if got, want := strings.Join(guarded.sched.Calls(), ","), "pause report,setjobs t,setjobs t,resume report,trigger report,trigger report"; got != want {
		t.Errorf("guarded node's scheduler saw %q, want %q", got, want)
	}

	// Logging out ends the browser's right to act.
	code, hdr, _ = guarded.do(t, http.MethodPost, "/logout", "", "Cookie", cookie)
	if code != http.StatusSeeOther || !strings.Contains(hdr.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("logout = %d, Set-Cookie %q", code, hdr.Get("Set-Cookie"))
	}
}

// POST /api/v1/jobs/{name}/trigger?force=true asks the leader to override
// the job's overlap policy; anything but a boolean is refused.
func TestServer_TriggerForce(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		query string
		code  int
	}{
		{"", 200}, {"?force=true", 200}, {"?force=false", 200}, {"?force=1", 200}, {"?force=yes", 400},
	} {
		if code, _, body := f.do(t, http.MethodPost, "/api/v1/jobs/report/trigger"+tc.query, ""); code != tc.code {
			t.Errorf("trigger%s = %d %s, want %d", tc.query, code, body, tc.code)
		}
	}
	if got, want := strings.Join(f.sched.Calls(), ","), "trigger report,trigger report force,trigger report,trigger report force"; got != want {
		t.Errorf("the scheduler saw %q, want %q", got, want)
	}
}

// web routes the nodes' calls to the transport at the path it serves.
func TestServer_InternalPrefix(t *testing.T) {
	if internalPrefix != rpc.Prefix {
		t.Errorf("web routes %s to the transport, which serves %s", internalPrefix, rpc.Prefix)
	}
}

// web mounts no store adapter of its own: without a StoreAPI handed in,
// the store's paths are not served, and the dashboard still reads Store.
func TestServer_NoStoreAPI(t *testing.T) {
	f := newFixture(t)
	f.srv.StoreAPI, f.srv.api.Store = nil, nil
	f.http.Config.Handler = f.srv.Handler()
	for _, path := range []string{"/api/v1/store?prefix=reports/", "/api/v1/history/reports/2026-07.csv"} {
		if code, _, _ := f.do(t, "GET", path, ""); code != http.StatusNotFound {
			t.Errorf("GET %s without a StoreAPI = %d, want 404", path, code)
		}
	}
	if code, _, body := f.get(t, "/store/"+reportKey); code != http.StatusOK {
		t.Errorf("key page without a StoreAPI = %d\n%s", code, body)
	}
}

package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/web/auth"
)

// Without api.token only the node's own host may change anything: a
// client on another address is refused (403 naming api.token), whatever
// X-Forwarded-For claims, and its dashboard shows no buttons. With a
// token, other hosts may act by presenting it.
func TestServer_ChangesWithoutTokenOnlyFromLoopback(t *testing.T) {
	open := newFixture(t)
	guarded := newFixture(t, func(s *Server) { s.APIToken = testToken })
	const remote, local, local6 = "192.0.2.7:5555", "127.0.0.1:5555", "[::1]:5555"

	for _, c := range []struct {
		method, path, body string
	}{
		{"POST", "/api/v1/jobs/report/trigger", ""},
		{"POST", "/api/v1/jobs/report/pause", ""},
		{"POST", "/api/v1/jobs/report/resume", ""},
		{"PUT", "/api/v1/jobset", `{"jobs":[]}`},
	} {
		rec := serve(open, c.method, c.path, c.body, remote, "192.0.2.1:8080", "X-Forwarded-For", "127.0.0.1")
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "api.token") {
			t.Errorf("%s %s from %s = %d %s, want 403 naming api.token", c.method, c.path, remote, rec.Code, rec.Body)
		}
	}
	if calls := open.sched.Calls(); len(calls) != 0 {
		t.Fatalf("remote changes reached the scheduler: %q", calls)
	}
	for _, from := range []string{local, local6} {
		if rec := serve(open, "POST", "/api/v1/jobs/report/trigger", "", from, "localhost:8080"); rec.Code != http.StatusOK {
			t.Errorf("trigger from %s = %d, want 200\n%s", from, rec.Code, rec.Body)
		}
	}
	if rec := serve(guarded, "POST", "/api/v1/jobs/report/trigger", "", remote, "192.0.2.1:8080", "Authorization", "Bearer "+testToken); rec.Code != http.StatusOK {
		t.Errorf("trigger from %s with the token = %d, want 200", remote, rec.Code)
	}

	remotePage := serve(open, "GET", "/jobs", "", remote, "192.0.2.1:8080").Body.String()
	if strings.Contains(remotePage, `data-action="trigger"`) || !strings.Contains(remotePage, "changes only from the node itself") {
		t.Errorf("a remote client's page on a node without a token shows buttons, or does not say why not")
	}
	if localPage := serve(open, "GET", "/jobs", "", local, "localhost:8080").Body.String(); !strings.Contains(localPage, `data-action="trigger"`) {
		t.Errorf("a local client's page on a node without a token has no buttons")
	}
}

// login logs in and returns the session cookie and its CSRF token.
func login(t *testing.T, f *fixture) (cookie, csrf string) {
	t.Helper()
	code, hdr, body := loginForm(t, f, testToken, "/jobs")
	if code != http.StatusSeeOther {
		t.Fatalf("login = %d\n%s", code, body)
	}
	cookie = strings.SplitN(hdr.Get("Set-Cookie"), ";", 2)[0]
	_, _, page := f.do(t, "GET", "/jobs", "", "Cookie", cookie)
	i := strings.Index(page, `data-csrf="`)
	if i < 0 {
		t.Fatal("logged-in page has no CSRF token")
	}
	return cookie, page[i+len(`data-csrf="`):][:32]
}

// Logging out ends the session on the server: the old cookie, replayed,
// authorizes nothing. A restarted server (a new Server with the same
// token) knows no sessions.
func TestServer_LogoutRevokesSession(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.APIToken = testToken })
	cookie, csrf := login(t, f)
	if code, _, body := f.do(t, "POST", "/api/v1/jobs/report/pause", "", "Cookie", cookie, auth.CSRFHeader, csrf); code != http.StatusOK {
		t.Fatalf("pause with the session = %d\n%s", code, body)
	}
	if code, _, _ := f.do(t, "POST", "/logout", "", "Cookie", cookie); code != http.StatusSeeOther {
		t.Fatalf("logout = %d", code)
	}
	code, _, body := f.do(t, "POST", "/api/v1/jobs/report/resume", "", "Cookie", cookie, auth.CSRFHeader, csrf)
	if code != http.StatusUnauthorized || !strings.Contains(body, "needs the API token") {
		t.Errorf("resume with the logged-out cookie = %d, want 401\n%s", code, body)
	}
	if _, _, page := f.do(t, "GET", "/jobs", "", "Cookie", cookie); strings.Contains(page, "log out") || strings.Contains(page, "data-csrf") {
		t.Error("the logged-out cookie still shows a logged-in page")
	}
	if got := strings.Join(f.sched.Calls(), ","); got != "pause report" {
		t.Errorf("scheduler saw %q, want only the pause before logout", got)
	}

	cookie, _ = login(t, f)
	restarted := newFixture(t, func(s *Server) { s.APIToken = testToken })
	if _, _, page := restarted.do(t, "GET", "/jobs", "", "Cookie", cookie); strings.Contains(page, "log out") {
		t.Error("a restarted server accepts a session it never started")
	}
	if _, _, page := f.do(t, "GET", "/jobs", "", "Cookie", cookie); !strings.Contains(page, "log out") {
		t.Error("the server that started the session does not accept it")
	}
}

// next= only ever sends the browser to a plain path here (auth.LocalPath):
// /login?next=/%09/host renders next as "/", and a login posted with it
// goes to "/".
func TestServer_LoginNextIsLocal(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.APIToken = testToken })
	_, _, page := f.get(t, "/login?next=/%09/evil.example")
	if !strings.Contains(page, `name="next" value="/"`) {
		t.Errorf("login form keeps a next= with a tab")
	}
	for _, next := range []string{"/\t/evil.example", "//evil.example", "/\\evil.example"} {
		if code, hdr, _ := loginForm(t, f, testToken, next); code != http.StatusSeeOther || hdr.Get("Location") != "/" {
			t.Errorf("login with next=%q redirects to %q, want /", next, hdr.Get("Location"))
		}
	}
}

package web

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/web/auth"
)

// loginACL logs a browser in with an ACL token and returns its session
// cookie.
func loginACL(t *testing.T, f *fixture, secret string) string {
	t.Helper()
	code, hdr, body := loginForm(t, f, secret, "/jobs")
	if code != http.StatusSeeOther || hdr.Get("Location") != "/jobs" {
		t.Fatalf("login = %d to %q, want 303 to /jobs\n%s", code, hdr.Get("Location"), body)
	}
	return strings.SplitN(hdr.Get("Set-Cookie"), ";", 2)[0]
}

// With ACLs on and no api.token, the dashboard's login takes an ACL
// token: the page shows who is logged in and their namespaces, and only
// the buttons the token's policies allow (none for a read-only one).
// The session holds the token as it stands: once it is revoked or
// expires, the session ends and the browser is sent to log in again.
func TestACL_DashboardLogin(t *testing.T) {
	clock := &stepClock{now: at(50)}
	f := newFixture(t, func(s *Server) { s.ACL = true; s.Clock = clock })
	viewer, viewerAcc := newACLToken(t, f, acl.Policy{Name: "viewer", Rules: []acl.Rule{{Namespace: "default", Capabilities: []acl.Capability{acl.CapRead}}}}, time.Time{})
	ops, _ := newACLToken(t, f, acl.Policy{Name: "ops", Rules: []acl.Rule{{Namespace: "default", Capabilities: []acl.Capability{acl.CapRead, acl.CapTrigger, acl.CapPause}}}}, at(50).Add(time.Hour))

	code, hdr, _ := f.do(t, "GET", "/jobs", "")
	if code != http.StatusSeeOther || hdr.Get("Location") != "/login?next=%2Fjobs" {
		t.Fatalf("anonymous /jobs = %d to %q, want 303 to the login form", code, hdr.Get("Location"))
	}
	if code, _, body := f.do(t, "GET", "/login", ""); code != http.StatusOK || !strings.Contains(body, "access token") || !strings.Contains(body, `id="token"`) {
		t.Fatalf("login form with ACLs on and no api.token = %d\n%.600s", code, body)
	}
	if code, _, body := loginForm(t, f, "fct_not-a-token", "/jobs"); code != http.StatusUnauthorized || !strings.Contains(body, "wrong token") {
		t.Fatalf("login with an unknown token = %d, want 401 wrong token\n%.600s", code, body)
	}

	roCookie := loginACL(t, f, viewer)
	code, _, page := f.do(t, "GET", "/jobs", "", "Cookie", roCookie)
	if code != http.StatusOK || !strings.Contains(page, "heartbeat") || !strings.Contains(page, `id="identity"`) ||
		!strings.Contains(page, "t-viewer") || !strings.Contains(page, `<b id="namespaces">default</b>`) {
		t.Fatalf("the viewer's /jobs = %d, want its jobs, its name and namespace\n%.3000s", code, page)
	}
	if !strings.Contains(page, "read only for token "+viewerAcc) {
		t.Errorf("the viewer's /jobs does not say it is read only for the viewer's token\n%.3000s", page)
	}
	for _, button := range []string{`data-action="trigger"`, `data-action="pause"`, `data-action="resume"`, `data-action="release"`} {
		if strings.Contains(page, button) {
			t.Errorf("the viewer's /jobs shows %s", button)
		}
	}
	i := strings.Index(page, `data-csrf="`)
	if i < 0 {
		t.Fatal("the viewer's page has no CSRF token")
	}
	csrf := page[i+len(`data-csrf="`):][:32]
	if code, _, body := f.do(t, "POST", "/api/v1/jobs/report/trigger", "", "Cookie", roCookie, auth.CSRFHeader, csrf); code != http.StatusForbidden || !strings.Contains(body, `"missing": "trigger"`) {
		t.Errorf("the viewer's session triggers = %d, want 403 missing trigger\n%s", code, body)
	}

	opsCookie := loginACL(t, f, ops)
	if _, _, page := f.do(t, "GET", "/jobs", "", "Cookie", opsCookie); !strings.Contains(page, `data-action="trigger"`) || !strings.Contains(page, `data-action="resume"`) {
		t.Errorf("the ops token's /jobs lacks its trigger and resume buttons\n%.3000s", page)
	}

	// Revoked: the session ends at once, on the API and the pages.
	if err := f.sched.ACL(context.Background(), acl.Cmd{Action: acl.ActTokenRevoke, Accessor: viewerAcc, At: at(60)}); err != nil {
		t.Fatal(err)
	}
	if code, _, body := f.do(t, "GET", "/api/v1/jobs", "", "Cookie", roCookie); code != http.StatusUnauthorized || !strings.Contains(body, "revoked") || !strings.Contains(body, viewerAcc) {
		t.Errorf("the revoked token's session reads the API: %d\n%s", code, body)
	}
	if code, hdr, _ := f.do(t, "GET", "/jobs", "", "Cookie", roCookie); code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/login") {
		t.Errorf("the revoked token's session reads /jobs: %d to %q, want 303 to the login form", code, hdr.Get("Location"))
	}
	if code, _, body := loginForm(t, f, viewer, "/jobs"); code != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
		t.Errorf("login with a revoked token = %d, want 401 revoked\n%.600s", code, body)
	}

	// Expired: the same, by the clock.
	clock.Advance(time.Hour)
	if code, hdr, _ := f.do(t, "GET", "/jobs", "", "Cookie", opsCookie); code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/login") {
		t.Errorf("the expired token's session reads /jobs: %d to %q, want 303 to the login form", code, hdr.Get("Location"))
	}
}

// A live event stream opened with an ACL token's session ends once the
// token is revoked: it does not outlive the check at its start.
func TestACL_StreamEndsWhenTokenRevoked(t *testing.T) {
	f := newFixture(t, withACL)
	viewer, acc := newACLToken(t, f, acl.Policy{Name: "viewer", Rules: []acl.Rule{{Namespace: "*", Capabilities: []acl.Capability{acl.CapRead}}}}, time.Time{})
	cookie := loginACL(t, f, viewer)
	req, err := http.NewRequestWithContext(t.Context(), "GET", f.http.URL+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cookie", cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		ended <- err
	}()
	if err := f.sched.ACL(context.Background(), acl.Cmd{Action: acl.ActTokenRevoke, Accessor: acc, At: at(60)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("stream ended with %v, want its end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked token's stream still open 10s after the revoke")
	}
}

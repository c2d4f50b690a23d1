package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// loginForm posts the login form from the fixture's (loopback) client.
func loginForm(t *testing.T, f *fixture, token, next string) (int, http.Header, string) {
	t.Helper()
	return f.do(t, "POST", "/login", url.Values{"token": {token}, "next": {next}}.Encode(), "Content-Type", formType)
}

// Five wrong tokens lock the client's address out: the sixth attempt is
// answered 429 with Retry-After, and so is the right token (and a Bearer
// header) until the lockout ends by the clock. The next wrong token
// locks out twice as long. Every failure is counted in /metrics, and
// each lockout is one audit entry.
func TestServer_LoginThrottle(t *testing.T) {
	clock := &stepClock{now: at(50)}
	f := newFixture(t, func(s *Server) { s.APIToken = testToken; s.Clock = clock })

	for i := 1; i <= loginMaxFailures; i++ {
		code, hdr, body := loginForm(t, f, fmt.Sprintf("guess-%d", i), "/jobs")
		if code != http.StatusUnauthorized || !strings.Contains(body, "wrong token") {
			t.Fatalf("wrong token %d = %d, want 401 wrong token\n%s", i, code, body)
		}
		if retry := hdr.Get("Retry-After"); (i == loginMaxFailures) != (retry == "30") {
			t.Errorf("wrong token %d: Retry-After %q (30 only once locked out)", i, retry)
		}
	}
	code, hdr, body := loginForm(t, f, "guess-6", "/jobs")
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "30" || !strings.Contains(body, "too many wrong tokens") {
		t.Fatalf("6th wrong token = %d, Retry-After %q, want 429 and 30\n%s", code, hdr.Get("Retry-After"), body)
	}
	clock.Advance(29 * time.Second)
	if code, hdr, _ := loginForm(t, f, testToken, "/jobs"); code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" {
		t.Errorf("right token during the lockout = %d, Retry-After %q; want 429 and 1", code, hdr.Get("Retry-After"))
	}
	if code, _, _ := f.do(t, "POST", "/api/v1/jobs/report/pause", "", "Authorization", "Bearer "+testToken); code != http.StatusTooManyRequests {
		t.Errorf("right Bearer token during the lockout = %d, want 429", code)
	}
	if calls := f.sched.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler saw %q during the lockout", calls)
	}

	// The lockout ends by the clock; the next wrong token locks out for
	// twice as long, at once.
	clock.Advance(time.Second)
	if code, hdr, _ := loginForm(t, f, "guess-7", "/jobs"); code != http.StatusUnauthorized || hdr.Get("Retry-After") != "60" {
		t.Errorf("wrong token after the lockout = %d, Retry-After %q; want 401 and a 60s lockout", code, hdr.Get("Retry-After"))
	}
	clock.Advance(time.Minute)
	code, hdr, _ = loginForm(t, f, testToken, "/jobs")
	if code != http.StatusSeeOther || hdr.Get("Location") != "/jobs" {
		t.Fatalf("right token after the lockout = %d to %q, want 303 to /jobs", code, hdr.Get("Location"))
	}
	// A right token clears the count: one more mistake is just a mistake.
	if code, hdr, _ := loginForm(t, f, "typo", "/"); code != http.StatusUnauthorized || hdr.Get("Retry-After") != "" {
		t.Errorf("a wrong token after a login = %d, Retry-After %q; want 401 without a lockout", code, hdr.Get("Retry-After"))
	}

	_, _, metrics := f.get(t, "/metrics")
	for _, want := range []string{
		`fencecron_login_failures_total{reason="wrong_token"} 7`,
		`fencecron_login_failures_total{reason="locked_out"} 3`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}

	// One audit entry per lockout, with the failures it punished.
	waitFor(t, 5*time.Second, "two audit entries", func() bool { return len(f.sched.Audits()) == 2 })
	want := []jobs.Event{
		{Kind: jobs.EventLoginFailed, Node: "n2", Detail: "5 failed logins from 127.0.0.1; locked out for 30s"},
		{Kind: jobs.EventLoginFailed, Node: "n2", Detail: "1 failed login from 127.0.0.1; locked out for 1m0s"},
	}
	for i, e := range f.sched.Audits() {
		if e != want[i] {
			t.Errorf("audit entry %d = %+v, want %+v", i, e, want[i])
		}
	}
}

// loginMaxFailures is web/auth's: the wrong tokens that lock an address
// out.
const loginMaxFailures = 5

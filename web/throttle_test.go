package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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

// An attacker with many addresses cannot flood the Raft log: a node
// proposes at most auditBurst lockout entries at once, then one per
// auditEvery, and the next entry counts those it left out.
func TestServer_LockoutAuditsAreRateLimited(t *testing.T) {
	clock := &stepClock{now: at(50)}
	f := newFixture(t, func(s *Server) { s.APIToken = testToken; s.Clock = clock })
	lockOut := func(ip string) {
		for i := 0; i < loginMaxFailures; i++ {
			serve(f, "POST", "/login", "token=nope", ip+":4000", "localhost", "Content-Type", formType)
		}
		if rec := serve(f, "POST", "/login", "token="+testToken, ip+":4000", "localhost", "Content-Type", formType); rec.Code != http.StatusTooManyRequests {
			t.Fatalf("%s not locked out: %d", ip, rec.Code)
		}
	}
	for i := 1; i <= 20; i++ {
		lockOut(fmt.Sprintf("198.51.100.%d", i))
	}
	waitFor(t, 5*time.Second, "the first audit entries", func() bool { return len(f.sched.Audits()) == auditBurst })
	clock.Advance(auditEvery)
	lockOut("203.0.113.1")
	waitFor(t, 5*time.Second, "one more audit entry", func() bool { return len(f.sched.Audits()) == auditBurst+1 })
	last := f.sched.Audits()[auditBurst]
	if want := "5 failed logins from 203.0.113.1; locked out for 30s (and 15 more lockouts on this node not recorded one by one)"; last.Detail != want {
		t.Errorf("entry after the pause = %q, want %q", last.Detail, want)
	}
	if n := f.srv.throttle.size(); n != 21 {
		t.Errorf("throttle holds %d addresses, want 21", n)
	}
}

// The throttle's rules on their own: the window, the growing lockouts up
// to their cap, forgetting a quiet address, and the bounded table.
func TestLoginThrottle(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		th := newLoginThrottle(10)
		now := at(0)
		for range loginMaxFailures - 1 {
			if d, _ := th.fail("a", now); d != 0 {
				t.Fatalf("locked out after fewer than %d failures", loginMaxFailures)
			}
		}
		now = now.Add(loginWindow + time.Second)
		if d, _ := th.fail("a", now); d != 0 {
			t.Errorf("failures older than the window still count: locked out for %s", d)
		}
	})
	t.Run("growing lockouts", func(t *testing.T) {
		th := newLoginThrottle(10)
		now := at(0)
		var d time.Duration
		for range loginMaxFailures {
			d, _ = th.fail("a", now)
		}
		var got []time.Duration
		for d > 0 && len(got) < 8 {
			got = append(got, d)
			if th.locked("a", now.Add(d-time.Nanosecond)) == 0 || th.locked("a", now.Add(d)) != 0 {
				t.Fatalf("lockout of %s does not end exactly then", d)
			}
			now = now.Add(d)
			d, _ = th.fail("a", now)
		}
		want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute, 15 * time.Minute}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("lockouts = %v, want %v", got, want)
		}
		// Quiet for loginForget after the lockout: a fresh start.
		now = now.Add(d + loginForget + time.Second)
		if d, _ := th.fail("a", now); d != 0 {
			t.Errorf("a long-quiet address is locked out at its first failure for %s", d)
		}
	})
	t.Run("bounded table", func(t *testing.T) {
		th := newLoginThrottle(3)
		for i, key := range []string{"a", "b", "c", "a", "d"} {
			th.fail(key, at(i))
		}
		if n := th.size(); n != 3 {
			t.Errorf("table holds %d addresses, want 3", n)
		}
		th.mu.Lock()
		_, hasB := th.entries["b"]
		_, hasA := th.entries["a"]
		th.mu.Unlock()
		if hasB || !hasA {
			t.Errorf("evicted the wrong address: b kept %v, a kept %v; want the least recent (b) gone", hasB, hasA)
		}
	})
	t.Run("client key", func(t *testing.T) {
		for remote, want := range map[string]string{
			"10.1.2.3:4000":               "10.1.2.3",
			"[::ffff:10.1.2.3]:4000":      "10.1.2.3",
			"[2001:db8:1:2:3:4:5:6]:4000": "2001:db8:1:2::/64",
			"[2001:db8:1:2:ffff::1]:4001": "2001:db8:1:2::/64",
			"[2001:db8:1:3:3:4:5:6]:4000": "2001:db8:1:3::/64",
			"[::1]:4000":                  "::/64",
		} {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = remote
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			if got := clientKey(req); got != want {
				t.Errorf("clientKey(%s) = %q, want %q", remote, got, want)
			}
		}
	})
}

package web

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

const (
	testToken = "the-api-token-for-the-hardening-tests"
	formType  = "application/x-www-form-urlencoded"
)

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serve runs one request through the server's handler as if it came
// from remote (ip:port), with the given Host.
func serve(f *fixture, method, path, body, remote, host string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr, req.Host = remote, host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// A plain-HTTP request naming a host that is not this node's is refused
// with 421 before any handler runs: the DNS-rebinding attack of issue 11
// (PUT /api/v1/jobset with Host and Origin attacker.example) changes
// nothing, and reads are refused too. Loopback names, IP addresses, the
// node's own names and api.allowed_hosts pass; TLS is exempt.
func TestServer_HostCheck(t *testing.T) {
	f := newFixture(t, func(s *Server) {
		s.AdvertiseHosts = []string{"n2", "10.0.0.2"}
		s.AllowedHosts = []string{"cron.example.com", "proxy.example.com:8443"}
	})
	jobset := `{"source":"attacker","jobs":[]}`

	code, hdr, body := f.do(t, "PUT", "/api/v1/jobset", jobset, "Host", "attacker.example", "Origin", "http://attacker.example")
	if code != http.StatusMisdirectedRequest {
		t.Fatalf("rebinding PUT /api/v1/jobset = %d, want 421\n%s", code, body)
	}
	var answer struct{ Error string }
	if err := json.Unmarshal([]byte(body), &answer); err != nil || !strings.Contains(answer.Error, "api.allowed_hosts") ||
		!strings.Contains(answer.Error, `"attacker.example"`) || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Errorf("refusal = %q (%v), want JSON naming the host and api.allowed_hosts", body, err)
	}
	if calls := f.sched.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler saw %q: the handler ran", calls)
	}

	tests := []struct {
		host string
		want int
	}{
		{"attacker.example:8080", 421},
		{"attacker.example.", 421},
		{"n2.attacker.example", 421},
		{"localhost.attacker.example", 421},
		{"proxy.example.com:8080", 421}, // allowed only with port 8443
		{"localhost:8080", 200},
		{"LocalHost.", 200},
		{"dashboard.localhost:8080", 200},
		{"127.0.0.1:8080", 200},
		{"127.9.9.9", 200},
		{"[::1]:8080", 200},
		{"192.0.2.7:8080", 200}, // an IP address is never a rebound name
		{"n2:8080", 200},
		{"N2", 200},
		{"10.0.0.2:8080", 200},
		{"cron.example.com", 200},
		{"cron.example.com:9999", 200},
		{"proxy.example.com:8443", 200},
	}
	for _, tc := range tests {
		if code, _, body := f.do(t, "GET", "/api/v1/status", "", "Host", tc.host); code != tc.want {
			t.Errorf("GET /api/v1/status with Host %q = %d, want %d\n%s", tc.host, code, tc.want, body)
		}
	}

	// Over TLS the name is the certificate's business.
	req := httptest.NewRequest("GET", "/api/v1/status", nil)
	req.Host, req.TLS = "attacker.example", &tls.ConnectionState{}
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("TLS request with Host attacker.example = %d, want 200", rec.Code)
	}
}

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
	if code, _, body := f.do(t, "POST", "/api/v1/jobs/report/pause", "", "Cookie", cookie, csrfHeader, csrf); code != http.StatusOK {
		t.Fatalf("pause with the session = %d\n%s", code, body)
	}
	if code, _, _ := f.do(t, "POST", "/logout", "", "Cookie", cookie); code != http.StatusSeeOther {
		t.Fatalf("logout = %d", code)
	}
	code, _, body := f.do(t, "POST", "/api/v1/jobs/report/resume", "", "Cookie", cookie, csrfHeader, csrf)
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
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Cookie", cookie)
	if restarted.srv.session(req) != "" {
		t.Error("a restarted server accepts a session it never started")
	}
	if f.srv.session(req) == "" {
		t.Error("the server that started the session does not accept it")
	}
}

// next= and back= only ever send the browser to a plain path here.
func TestLocalPath(t *testing.T) {
	for p, want := range map[string]string{
		"/jobs":                         "/jobs",
		"/jobs/report?x=1#top":          "/jobs/report?x=1#top",
		"/store/reports/a%20b.csv":      "/store/reports/a%20b.csv",
		"":                              "/",
		"jobs":                          "/",
		"//evil.example/":               "/",
		"/\\evil.example":               "/",
		"/jobs\\..\\x":                  "/",
		"\\\\evil.example":              "/",
		"/\t/evil.example":              "/",
		"/%09/evil.example":             "/",
		"/%2F/evil.example":             "/",
		"/%5Cevil.example":              "/",
		"/x\r\nSet-Cookie: a=b":         "/",
		"/x%0d%0aSet-Cookie":            "/",
		"/\u0085x":                      "/",
		"https://evil.example/":         "/",
		"/%zz":                          "/",
		"/" + strings.Repeat("a", 3000): "/",
	} {
		if got := localPath(p); got != want {
			t.Errorf("localPath(%q) = %q, want %q", p, got, want)
		}
	}

	// Through the handlers: /login?next=/%09/host renders next as "/",
	// and a login posted with it goes to "/".
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

// Bodies are bounded: a job set over maxJobSetBody is 413 and reaches no
// scheduler; a login form over maxLoginBody is 400 and no failed token.
func TestServer_BodyLimits(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.APIToken = testToken })
	big := `{"source":"` + strings.Repeat("x", maxJobSetBody) + `","jobs":[]}`
	if code, _, body := f.do(t, "PUT", "/api/v1/jobset", big, "Authorization", "Bearer "+testToken); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized job set = %d, want 413\n%.200s", code, body)
	}
	if calls := f.sched.Calls(); len(calls) != 0 {
		t.Errorf("scheduler saw %q", calls)
	}
	form := "token=" + strings.Repeat("x", maxLoginBody)
	if code, _, body := f.do(t, "POST", "/login", form, "Content-Type", formType); code != http.StatusBadRequest || !strings.Contains(body, "cannot read the login form") {
		t.Errorf("oversized login form = %d, want 400\n%.300s", code, body)
	}
	if _, _, metrics := f.get(t, "/metrics"); !strings.Contains(metrics, `fencecron_login_failures_total{reason="wrong_token"} 0`) {
		t.Error("an unreadable login form counted as a wrong token")
	}
}

// openWithLimits starts the fixture's server on a real socket (Open), so the
// http.Server's limits apply.
func openWithLimits(t *testing.T, limits Limits) *fixture {
	t.Helper()
	f := newFixture(t, func(s *Server) { s.Limits = limits; s.Addr = "127.0.0.1:0"; s.TLS = testPeerID })
	if err := f.srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.srv.Close(ctx)
	})
	return f
}

// At most MaxEventStreams streams are open at once; one more gets 503
// with Retry-After (and is counted), and a place freed is taken again.
func TestServer_EventStreamCap(t *testing.T) {
	f := openWithLimits(t, Limits{MaxEventStreams: 2})
	url := f.srv.URL() + "/api/v1/events"
	ctx1, cancel1 := context.WithCancel(t.Context())
	defer cancel1()
	open := func(ctx context.Context) <-chan sse {
		ch, resp := stream(t, url, ctx)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream = %d, want 200", resp.StatusCode)
		}
		<-ch // the retry hint: the stream is being served
		return ch
	}
	first := open(ctx1)
	open(t.Context())

	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("third stream = %d, Retry-After %q; want 503 and 30", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if _, _, metrics := f.get(t, "/metrics"); !strings.Contains(metrics, "fencecron_http_event_streams_refused_total 1\n") {
		t.Error("the refused stream is not counted")
	}

	cancel1()
	for range first {
	}
	waitFor(t, 5*time.Second, "the first stream's place freed", func() bool { return f.srv.streams.Load() == 1 })
	open(t.Context())
}

// The server's read and write timeouts bound a request and its answer,
// not an event stream that lives on after them: heartbeats keep arriving
// (at the configured interval) long after both have passed.
func TestServer_EventStreamOutlivesTimeouts(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	f := openWithLimits(t, Limits{ReadTimeout: readTimeout, WriteTimeout: readTimeout, EventHeartbeat: 20 * time.Millisecond})
	req, _ := http.NewRequestWithContext(t.Context(), "GET", f.srv.URL()+"/api/v1/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	pings := 0
	sc := bufio.NewScanner(resp.Body)
	for time.Since(start) < 5*readTimeout {
		if !sc.Scan() {
			t.Fatalf("stream ended after %s and %d pings (%v); the read timeout is %s", time.Since(start), pings, sc.Err(), readTimeout)
		}
		if sc.Text() == ": ping" {
			pings++
		}
	}
	if pings < 10 {
		t.Errorf("%d pings in %s at a 20ms heartbeat", pings, time.Since(start))
	}
}

package auth

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

const testToken = "the-api-token-of-the-auth-tests"

var t0 = time.Date(2026, 8, 1, 9, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

type fakeClock struct{ now time.Time }

func (c fakeClock) Now() time.Time                      { return c.now }
func (c fakeClock) NewTimer(d time.Duration) jobs.Timer { return jobs.SystemClock{}.NewTimer(d) }

// auditTrail records the lockouts written to it.
type auditTrail struct {
	mu  sync.Mutex
	evs []jobs.Event
}

func (a *auditTrail) Audit(_ context.Context, kind, node, detail string) error {
	a.mu.Lock()
	a.evs = append(a.evs, jobs.Event{Kind: kind, Node: node, Detail: detail})
	a.mu.Unlock()
	return nil
}

func (a *auditTrail) entries() []jobs.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.evs)
}

// newGuard is a Guard of node n2 that logs nowhere, closed when the
// test ends.
func newGuard(t *testing.T, cfg Config) *Guard {
	t.Helper()
	cfg.Node, cfg.Logger = "n2", slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.Auditor == nil {
		cfg.Auditor = &auditTrail{}
	}
	g := New(cfg)
	t.Cleanup(g.Close)
	return g
}

// from is a request from remote (ip:port).
func from(remote string) *http.Request {
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = remote
	return req
}

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

// A session signed for another token, or expired, is no session.
func TestGuard_SessionValidity(t *testing.T) {
	g := newGuard(t, Config{Token: "the-api-token-0123456789", Clock: fakeClock{now: at(0)}})
	sess := g.newSession("", at(0))
	req, _ := http.NewRequest("GET", "/", nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: sess})
	if g.session(req) != sess {
		t.Fatal("fresh session not accepted")
	}
	g.cfg.Clock = fakeClock{now: at(0).Add(sessionTTL)}
	if g.session(req) != "" {
		t.Error("expired session accepted")
	}
	// A node restarted with another api.token signs with another key:
	// even a nonce it knows live is no session under the old signature.
	other := newGuard(t, Config{Token: "another-token-0123456789", Clock: fakeClock{now: at(1)}})
	nonce, _, _ := strings.Cut(sess, ".")
	other.sessions.add(nonce, "", at(1).Add(time.Hour), at(1))
	if other.session(req) != "" {
		t.Error("a session of the old token accepted after the token changed")
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
		if got := LocalPath(p); got != want {
			t.Errorf("LocalPath(%q) = %q, want %q", p, got, want)
		}
	}

}

// One ACL token's logins keep at most maxSessionsPerToken sessions,
// dropping its own oldest: they cannot push out other people's.
func TestSessionTable_PerToken(t *testing.T) {
	tab := newSessionTable(maxSessions)
	tab.add("other", "B", at(100), at(0))
	for i := range maxSessionsPerToken + 5 {
		tab.add(fmt.Sprint("a", i), "A", at(10+i), at(0))
	}
	if _, ok := tab.lookup("other", at(1)); !ok {
		t.Error("another token's session was dropped")
	}
	if _, ok := tab.lookup("a0", at(1)); ok {
		t.Error("the oldest of A's sessions is still live past the cap")
	}
	if _, ok := tab.lookup(fmt.Sprint("a", maxSessionsPerToken+4), at(1)); !ok {
		t.Error("A's newest session is not live")
	}
	n := 0
	for _, e := range tab.live {
		if e.accessor == "A" {
			n++
		}
	}
	if n != maxSessionsPerToken {
		t.Errorf("A holds %d sessions, want %d", n, maxSessionsPerToken)
	}
}

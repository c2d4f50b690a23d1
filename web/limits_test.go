package web

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/auth"
)

// Bodies are bounded: a job set over jobs.MaxSetBytes is 413 and reaches no
// scheduler; a login form over auth.MaxLoginBody is 400 and no failed token.
func TestServer_BodyLimits(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.APIToken = testToken })
	big := `{"source":"` + strings.Repeat("x", jobs.MaxSetBytes) + `","jobs":[]}`
	if code, _, body := f.do(t, "PUT", "/api/v1/jobset", big, "Authorization", "Bearer "+testToken); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized job set = %d, want 413\n%.200s", code, body)
	}
	if code, _, body := f.do(t, "PUT", "/api/v1/jobset", big, "Authorization", "Bearer "+testToken, wire.JobCountHeader, "1"); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized job set, its jobs counted = %d, want 413\n%.200s", code, body)
	}
	if calls := f.sched.Calls(); len(calls) != 0 {
		t.Errorf("scheduler saw %q", calls)
	}
	form := "token=" + strings.Repeat("x", auth.MaxLoginBody)
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
	waitFor(t, 5*time.Second, "the first stream's place taken again", func() bool {
		ch, resp := stream(t, url, t.Context())
		if resp.StatusCode != http.StatusOK {
			return false
		}
		<-ch // the retry hint: the stream is being served
		return true
	})
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

package executor_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs/executor"
)

func twoXX(s int) bool { return s >= 200 && s <= 299 }

func httpReq(url string) executor.HTTPRequest {
	return executor.HTTPRequest{Method: "POST", URL: url, Header: http.Header{"X-A": {"1"}}, Body: []byte("hi"), Expected: twoXX, ExpectedText: "any 2xx", Timeout: 10 * time.Second}
}

func TestRunHTTP_SendsAndCapturesTheBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write([]byte(r.Method + " " + r.Header.Get("X-A") + " " + string(b)))
	}))
	defer srv.Close()
	res := executor.RunHTTP(context.Background(), httpReq(srv.URL))
	if !res.Success() || res.Status != 200 || string(res.Stdout) != "POST 1 hi" {
		t.Errorf("result = %+v (%q), want success with 200 and %q", res, res.Stdout, "POST 1 hi")
	}
	// The request has an end, so a duration, as a process has.
	if res.Ended.IsZero() || res.Ended.Before(res.Started) || res.Duration() <= 0 {
		t.Errorf("started %s, ended %s: want an end after the start", res.Started, res.Ended)
	}
	if res := executor.RunHTTP(context.Background(), httpReq("http://127.0.0.1:1/")); res.Err == nil || res.Ended.IsZero() {
		t.Errorf("a request that failed: err %v, ended %s; want an error and an end", res.Err, res.Ended)
	}
}

func TestRunHTTP_CapsTheBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 100)))
	}))
	defer srv.Close()
	req := httpReq(srv.URL)
	req.MaxOutput = 10
	res := executor.RunHTTP(context.Background(), req)
	if res.Success() || !res.OutputTruncated || len(res.Stdout) != 10 {
		t.Errorf("result = %+v, want a truncated body of 10 bytes and no success", res)
	}
}

func TestRunHTTP_Timeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	req := httpReq(srv.URL)
	req.Timeout = 200 * time.Millisecond
	if res := executor.RunHTTP(context.Background(), req); !res.TimedOut || res.Success() {
		t.Errorf("result = %+v, want timed out", res)
	}
}

// A redirect on the same host is followed; one to another host is not
// (the request carries the attempt's token): the redirect is the answer,
// and it fails the attempt naming where it pointed.
func TestRunHTTP_Redirects(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the other host got a request with token %q", r.Header.Get("Fencecron-Token"))
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "/away":
			http.Redirect(w, r, other.URL+"/steal", http.StatusFound)
		default:
			w.Write([]byte("final " + r.Header.Get("Fencecron-Token")))
		}
	}))
	defer srv.Close()
	req := httpReq(srv.URL + "/same")
	req.Method, req.Body = "GET", nil
	req.Header.Set("Fencecron-Token", "t")
	if res := executor.RunHTTP(context.Background(), req); !res.Success() || string(res.Stdout) != "final t" {
		t.Errorf("same-host redirect: %+v (%q), want success with %q", res, res.Stdout, "final t")
	}
	req.URL = srv.URL + "/away"
	res := executor.RunHTTP(context.Background(), req)
	if res.Success() || res.Status != http.StatusFound || res.Err == nil || !strings.Contains(res.Err.Error(), "302") || !strings.Contains(res.Err.Error(), "not followed") {
		t.Errorf("off-host redirect: %+v, want a failure naming 302 and the redirect not followed", res)
	}
}

func TestRunHTTP_UnexpectedStatusAndBadCA(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusTeapot)
	}))
	defer srv.Close()
	res := executor.RunHTTP(context.Background(), httpReq(srv.URL))
	if res.Success() || res.Err == nil || !strings.Contains(res.Err.Error(), "418") {
		t.Errorf("result = %+v, want a failure naming 418", res)
	}
	req := httpReq(srv.URL)
	req.CAFile = "/nonexistent/ca.pem"
	if res := executor.RunHTTP(context.Background(), req); res.Success() || res.Err == nil || !strings.Contains(res.Err.Error(), "ca_file") {
		t.Errorf("result = %+v, want a failure naming ca_file", res)
	}
}

// A failed request's error is logged and shown to readers without the
// API token: it names the service but never the URL's path, query or user
// info, where a job's credential often is.
func TestRunHTTP_ErrorsHideTheURLsCredentials(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusInternalServerError)
	}))
	host := srv.URL
	secretURL := strings.Replace(srv.URL, "http://", "http://USERINFO:PASSWORD@", 1) + "/PATHSECRET?api_key=QUERYSECRET"
	res := executor.RunHTTP(context.Background(), httpReq(secretURL))
	srv.Close()
	// The server is gone: the same request now fails before any status.
	refused := executor.RunHTTP(context.Background(), httpReq(secretURL))
	for _, r := range []executor.Result{res, refused} {
		if r.Err == nil {
			t.Fatalf("result = %+v, want a failure", r)
		}
		msg := r.Err.Error()
		if !strings.Contains(msg, "POST "+host) {
			t.Errorf("error %q does not name the service POST %s", msg, host)
		}
		for _, secret := range []string{"USERINFO", "PASSWORD", "PATHSECRET", "QUERYSECRET"} {
			if strings.Contains(msg, secret) {
				t.Errorf("error %q shows %s", msg, secret)
			}
		}
	}
	if !strings.Contains(res.Err.Error(), "500") {
		t.Errorf("error %q does not name the status", res.Err)
	}
}

// Runs that send through one HTTPClients to one target share its
// connections: the second finds the first's open, and the request of each
// is built by Prepare, so Send only sends. RunHTTP keeps nothing open.
func TestHTTPClients_KeepsTheTargetsConnectionWarm(t *testing.T) {
	srv, newConns := countingServer(t, nil)
	p := &executor.HTTPClients{}
	defer p.CloseIdle()
	for i := range 3 {
		prep := p.Prepare(httpReq(srv.URL))
		prep.Header().Set("Traceparent", "00-x")
		if res := prep.Send(context.Background()); !res.Success() || string(res.Stdout) != "ok" {
			t.Fatalf("run %d: result %+v, want success", i, res)
		}
	}
	if got, want := newConns(), 1; got != want {
		t.Errorf("three runs through one HTTPClients opened %d connections, want %d", got, want)
	}
	for range 2 {
		if res := executor.RunHTTP(context.Background(), httpReq(srv.URL)); !res.Success() {
			t.Fatalf("RunHTTP: %+v", res)
		}
	}
	if got, want := newConns(), 2; got != want {
		t.Errorf("two RunHTTP calls opened %d connections, want %d", got, want)
	}
}

// countingServer starts a loopback server that reads a request, calls
// hold (if not nil) and answers "ok"; newConns returns how many
// connections it accepted since its last call.
func countingServer(t *testing.T, hold func()) (srv *httptest.Server, newConns func() int) {
	var mu sync.Mutex
	conns := 0
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if hold != nil {
			hold()
		}
		w.Write([]byte("ok"))
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, func() int {
		mu.Lock()
		defer mu.Unlock()
		n := conns
		conns = 0
		return n
	}
}

// Many jobs sending to one service at the same second: the connections
// the first burst opened are all there for the next, none dialed again.
func TestHTTPClients_KeepsABurstsConnectionsWarm(t *testing.T) {
	const burst = 300 // a third of a thousand jobs firing together, more than 256
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	// Every request of a burst is held until the last one arrives, so
	// the burst needs a connection per request. The bound on the hold is
	// for a request that never arrives; it must outlast the burst's
	// arrival on a loaded machine (300 requests with -race under CI took
	// more than 5 s once: the first ones were answered, and their
	// connections taken by the last).
	srv, newConns := countingServer(t, func() {
		mu.Lock()
		arrived++
		if arrived == burst {
			close(all)
		}
		wait := all
		mu.Unlock()
		select {
		case <-wait:
		case <-time.After(30 * time.Second): // a request lost: the counts below say so
		}
	})

	p := &executor.HTTPClients{}
	defer p.CloseIdle()
	send := func() (opened int) {
		var (
			wg     sync.WaitGroup
			failed atomic.Int64
		)
		for range burst {
			wg.Go(func() {
				req := httpReq(srv.URL)
				req.Timeout = time.Minute // beyond the handler's wait
				if res := p.Prepare(req).Send(context.Background()); !res.Success() {
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Errorf("%d of the burst's %d requests failed", n, burst)
		}
		mu.Lock()
		defer mu.Unlock()
		arrived, all = 0, make(chan struct{})
		return newConns()
	}
	if got := send(); got != burst {
		t.Fatalf("the first burst of %d requests opened %d connections, want one each", burst, got)
	}
	if got := send(); got != 0 {
		t.Errorf("the second burst of %d requests opened %d new connections, want 0: all %d were kept", burst, got, burst)
	}
}

// A request whose preparation failed sends nothing and says why at Send;
// a cancelled context sends nothing either.
func TestHTTPClients_PrepareErrorsAtSend(t *testing.T) {
	p := &executor.HTTPClients{}
	defer p.CloseIdle()
	req := httpReq("http://127.0.0.1:1/")
	req.CAFile = "/nonexistent/ca.pem"
	prep := p.Prepare(req)
	if prep.Header() != nil {
		t.Errorf("a request that cannot be sent has a header")
	}
	if res := prep.Send(context.Background()); res.Err == nil || !strings.Contains(res.Err.Error(), "ca_file") || res.Ended.IsZero() {
		t.Errorf("result %+v: want the ca_file error and an end", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := p.Prepare(httpReq("http://127.0.0.1:1/")).Send(ctx); !res.Cancelled || res.Err == nil {
		t.Errorf("result %+v: want cancelled, not sent", res)
	}
}

// A run to a target nothing was sent to lately has its connection opened
// by Warm, before its send, and sends on it; one the server closed
// meanwhile is not sent on.
func TestPreparedHTTP_WarmOpensTheConnectionAhead(t *testing.T) {
	var mu sync.Mutex
	var states []http.ConnState
	var conns []net.Conn
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		states = append(states, st)
		if st == http.StateNew {
			conns = append(conns, c)
		}
	}
	srv.Start()
	defer srv.Close()
	seen := func() (opened, used int) {
		mu.Lock()
		defer mu.Unlock()
		for _, st := range states {
			switch st {
			case http.StateNew:
				opened++
			case http.StateActive:
				used++
			}
		}
		return opened, used
	}
	waitOpened := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for opened, _ := seen(); opened < n; opened, _ = seen() {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections opened, want %d", opened, n)
			}
			time.Sleep(time.Millisecond)
		}
	}

	p := &executor.HTTPClients{}
	defer p.CloseIdle()
	prep := p.Prepare(httpReq(srv.URL))
	prep.Warm(t.Context())
	// The server accepts in its own goroutine: the connection is open
	// once it says so.
	waitOpened(1)
	if opened, used := seen(); opened != 1 || used != 0 {
		t.Fatalf("after Warm: %d connections opened, %d used; want 1 opened ahead, none used", opened, used)
	}
	if res := prep.Send(t.Context()); !res.Success() {
		t.Fatalf("send: %+v", res)
	}
	if opened, used := seen(); opened != 1 || used != 1 {
		t.Errorf("after Send: %d connections opened, %d used; want the one opened ahead used", opened, used)
	}
	// The target is warm now: Warm opens nothing more.
	p.Prepare(httpReq(srv.URL)).Warm(t.Context())
	if opened, _ := seen(); opened != 1 {
		t.Errorf("Warm on a warm target opened %d connections, want none more", opened-1)
	}

	// A server that drops the connection opened ahead: the run dials anew.
	q := &executor.HTTPClients{}
	defer q.CloseIdle()
	prep = q.Prepare(httpReq(srv.URL))
	prep.Warm(t.Context())
	waitOpened(2)
	mu.Lock()
	conns[1].Close()
	mu.Unlock()
	if res := prep.Send(t.Context()); !res.Success() {
		t.Errorf("send after the server dropped the connection opened ahead: %+v", res)
	}
	if opened, _ := seen(); opened != 3 {
		t.Errorf("%d connections opened in all, want 3: the dropped one replaced", opened)
	}
}

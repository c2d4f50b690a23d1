package rpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// Every call the leader is asked crosses the wire as its own typed
// message and arrives with its arguments intact.
func TestServer_TypedCalls(t *testing.T) {
	leader := &fakeLeader{}
	addr := node(t, leader, nil)
	c := &Client{TLS: clientID, LeaderHTTP: func() (string, error) { return addr, nil }}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	at := time.Date(2026, 8, 1, 9, 0, 0, 123456789, time.UTC)
	exit := 3
	spec := jobs.Spec{Name: "report", Schedules: []string{"0 9 * * *", "@every 1h"}}

	hash, err := c.SetJobs(ctx, []jobs.Spec{spec}, "apply from ops", nil)
	if err != nil || hash != "hash-apply from ops" {
		t.Fatalf("SetJobs = %q, %v", hash, err)
	}
	run, err := c.TriggerAt(ctx, "report", true, at)
	if err != nil || run.ID != "report@manual" {
		t.Fatalf("Trigger = %+v, %v", run, err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("Pause", c.Pause(ctx, "report", true))
	must("Started", c.Started(ctx, "report@1.1", at))
	must("Complete", c.Complete(ctx, replicated.Completion{Attempt: "report@1.1", State: jobs.Failed, ExitCode: &exit, StoreOutcome: "stale_owner", Error: "refused", EndedAt: at}))
	must("Note", c.Note(ctx, "report@1.1", "suspect", "w1", "late"))
	must("Audit", c.Audit(ctx, jobs.EventLoginFailed, "n3", "locked out"))
	reply, err := c.Renew(ctx, "report@1.1", "w1")
	if err != nil || !reply.Held || reply.TTL != jobs.Duration(2*time.Second) {
		t.Fatalf("Renew = %+v, %v", reply, err)
	}
	want := []string{
		"set_jobs report:0 9 * * *|@every 1h from apply from ops",
		"trigger report force=true at 2026-08-01T09:00:00.123456789Z",
		"pause report true",
		"started report@1.1 at 2026-08-01T09:00:00.123456789Z",
		`complete report@1.1 failed exit=3 store=stale_owner error="refused"`,
		`note report@1.1 suspect w1 "late"`,
		`audit login_failed n3 "locked out"`,
		"renew report@1.1 w1",
	}
	if got := leader.Calls(); !reflect.DeepEqual(got, want) {
		t.Errorf("the leader saw\n%q\nwant\n%q", got, want)
	}

	// A domain refusal comes back as the same error.
	if _, err := c.TriggerAt(ctx, "nope", false, at); !errors.Is(err, jobs.ErrUnknownJob) {
		t.Errorf("Trigger(nope) = %v, want ErrUnknownJob", err)
	}
}

// peerTLS is the TLS state of a request from a node of the cluster.
func peerTLS() *tls.ConnectionState {
	return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}
}

func serve(t *testing.T, s *Server, method, path, body string, state *tls.ConnectionState) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.TLS = state
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// The Server takes only nodes of the cluster; what it takes it decodes
// strictly, and every refusal is a structured error a client can read.
func TestServer_Refusals(t *testing.T) {
	leader := &fakeLeader{}
	s := &Server{Leader: leader}
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		tls          *tls.ConnectionState
		code         int
		wire         string
	}{
		{"plain HTTP", "POST", "/internal/v1/renew", `{"attempt":"a","node":"w1"}`, nil, 401, "unauthorized"},
		{"TLS without a node's certificate", "POST", "/internal/v1/renew", `{"attempt":"a","node":"w1"}`, &tls.ConnectionState{}, 401, "unauthorized"},
		{"a stranger learns no paths", "POST", "/internal/v1/nope", `{}`, nil, 401, "unauthorized"},
		{"an unknown call", "POST", "/internal/v1/nope", `{}`, peerTLS(), 404, "no_route"},
		{"a path outside the prefix", "POST", "/renew", `{}`, peerTLS(), 404, "no_route"},
		{"the raw log command of old: not a 404, which an older node would take for no such attempt", "POST", "/internal/v1/apply", `{"op":"complete"}`, peerTLS(), 503, "unavailable"},
		{"GET", "GET", "/internal/v1/renew", ``, peerTLS(), 405, "method_not_allowed"},
		{"an unknown field", "POST", "/internal/v1/complete", `{"op":"complete","attempt":"a"}`, peerTLS(), 400, "bad_request"},
		{"not JSON", "POST", "/internal/v1/renew", `attempt=a`, peerTLS(), 400, "bad_request"},
		{"a missing attempt", "POST", "/internal/v1/renew", `{"node":"w1"}`, peerTLS(), 400, "bad_request"},
		{"a trigger without a job", "POST", "/internal/v1/trigger", `{"force":true}`, peerTLS(), 400, "bad_request"},
		{"too large", "POST", "/internal/v1/complete", `{"attempt":"` + strings.Repeat("x", maxBody) + `"}`, peerTLS(), 413, "too_large"},
		{"a job set too large", "POST", "/internal/v1/set_jobs", `{"source":"` + strings.Repeat("x", maxSetJobsBody) + `"}`, peerTLS(), 413, "too_large"},
		{"dispatch to a node that runs no jobs", "POST", "/internal/v1/dispatch", `{"attempt":{"id":"a.1"}}`, peerTLS(), 400, "bad_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := serve(t, s, tc.method, tc.path, tc.body, tc.tls)
			if code != tc.code || !strings.Contains(body, `"code":"`+tc.wire+`"`) {
				t.Errorf("%s %s = %d %s, want %d with code %q", tc.method, tc.path, code, body, tc.code, tc.wire)
			}
		})
	}
	if got := leader.Calls(); len(got) != 0 {
		t.Errorf("refused requests reached the leader: %q", got)
	}
	if code, body := serve(t, s, "POST", "/internal/v1/renew", `{"attempt":"a","node":"w1"}`, peerTLS()); code != 200 || !strings.Contains(body, `"held":true`) {
		t.Errorf("a node's renewal = %d %s", code, body)
	}
}

// dispatchClient is the client of node n1, whose own worker counts what it
// accepts (local), for a cluster where w2's worker accepts with remote and
// w3's is closed.
func dispatchClient(t *testing.T, remote func(worker.Assignment) error) (*Client, *atomic.Int32) {
	var local atomic.Int32
	w2 := node(t, &fakeLeader{}, remote)
	busy := node(t, &fakeLeader{}, func(worker.Assignment) error { return errors.New("worker closed") })
	return &Client{
		Self: "n1", TLS: clientID,
		Local: acceptFunc(func(worker.Assignment) error { local.Add(1); return nil }),
		NodeHTTP: func(n string) (string, error) {
			return map[string]string{"w2": w2, "w3": busy}[n], nil
		},
	}, &local
}

// Dispatch hands an assignment to this node's worker without the network,
// another's over it; a worker's refusal is "unavailable", which the
// leader retries elsewhere.
func TestClient_Dispatch(t *testing.T) {
	var remote atomic.Int32
	a := worker.Assignment{Run: jobs.Run{ID: "report@1"}, Attempt: jobs.Attempt{ID: "report@1.1", Number: 1}}
	c, local := dispatchClient(t, func(got worker.Assignment) error {
		remote.Add(1)
		if got.Attempt.ID != a.Attempt.ID {
			t.Errorf("w2 got %+v", got)
		}
		return nil
	})
	if err := c.Dispatch(t.Context(), "n1", a); err != nil || local.Load() != 1 || remote.Load() != 0 {
		t.Fatalf("dispatch to self: %v (local %d, remote %d)", err, local.Load(), remote.Load())
	}
	if err := c.Dispatch(t.Context(), "w2", a); err != nil || remote.Load() != 1 {
		t.Fatalf("dispatch to w2: %v (remote %d)", err, remote.Load())
	}
	err := c.Dispatch(t.Context(), "w3", a)
	var re *errcode.RemoteError
	if !errors.As(err, &re) || re.Code != "unavailable" || !strings.Contains(err.Error(), "worker closed") {
		t.Errorf("dispatch to a closed worker: %v, want unavailable saying why", err)
	}
}

// DispatchMany hands several assignments to another node's worker in one
// call, and to this node's without the network; a worker's refusal is
// "unavailable", which makes the leader dispatch each on its own.
func TestClient_DispatchMany(t *testing.T) {
	var remote atomic.Int32
	as := []worker.Assignment{
		{Run: jobs.Run{ID: "a@1"}, Attempt: jobs.Attempt{ID: "a@1.1", Number: 1}},
		{Run: jobs.Run{ID: "b@1"}, Attempt: jobs.Attempt{ID: "b@1.1", Number: 1}},
	}
	c, local := dispatchClient(t, func(worker.Assignment) error { remote.Add(1); return nil })
	if err := c.DispatchMany(t.Context(), "n1", as); err != nil || local.Load() != 2 || remote.Load() != 0 {
		t.Fatalf("dispatch to self: %v (local %d, remote %d)", err, local.Load(), remote.Load())
	}
	if err := c.DispatchMany(t.Context(), "w2", as); err != nil || remote.Load() != 2 {
		t.Fatalf("dispatch to w2: %v (remote %d)", err, remote.Load())
	}
	err := c.DispatchMany(t.Context(), "w3", as)
	var re *errcode.RemoteError
	if !errors.As(err, &re) || re.Code != "unavailable" || !strings.Contains(err.Error(), "worker closed") {
		t.Errorf("dispatch to a closed worker: %v, want unavailable saying why", err)
	}
	if err := c.DispatchMany(t.Context(), "w2", make([]worker.Assignment, maxDispatchMany+1)); err == nil {
		t.Errorf("a batch over %d: no error", maxDispatchMany)
	}
}

// Job set changes reach the leader as they came, and its refusals come
// back as the errors the caller acts on: a set that is not the base, or
// changes to be sent as the set they make, which is also what a leader
// of a version without the call means.
func TestClient_SetJobsChanges(t *testing.T) {
	leader := &fakeLeader{}
	addr := node(t, leader, nil)
	c := &Client{TLS: clientID, LeaderHTTP: func() (string, error) { return addr, nil }, Servers: func() []string { return nil }}
	ch := scheduler.JobChanges{Base: "h1", Upsert: []jobs.Spec{{Name: "a", Schedules: []string{"@daily"}}}, Remove: []string{"b"}}
	hash, n, err := c.SetJobsChanges(t.Context(), ch, "apply")
	if err != nil || hash != "hash-apply" || n != 7 {
		t.Fatalf("SetJobsChanges = %q, %d, %v", hash, n, err)
	}
	if got, want := leader.Calls(), []string{"set_jobs_changes against h1: a, removing b, from apply"}; !slices.Equal(got, want) {
		t.Errorf("the leader was asked %q, want %q", got, want)
	}
	for base, want := range map[string]error{"stale": fsm.ErrJobsDiffBase, "unchecked": scheduler.ErrChangesNeedSet, "bad": jobs.ErrInvalidConfig} {
		ch.Base = base
		if _, _, err := c.SetJobsChanges(t.Context(), ch, "apply"); !errors.Is(err, want) {
			t.Errorf("against %s: %v; want %v", base, err, want)
		}
	}

	older := stub(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(&Server{}).fail(w, r, fmt.Errorf("%s: %w", r.URL.Path, wire.ErrNoRoute))
	}))
	c = &Client{TLS: clientID, LeaderHTTP: func() (string, error) { return older, nil }, Servers: func() []string { return nil }}
	if _, _, err := c.SetJobsChanges(t.Context(), ch, "apply"); !errors.Is(err, scheduler.ErrChangesNeedSet) {
		t.Errorf("from a leader without the call: %v; want ErrChangesNeedSet", err)
	}
}

package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fencecron/fencecron/scheduler/acl"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/election/clustertls/clustertlstest"
	"github.com/fencecron/fencecron/fencedstore/errcode"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// clientID is the cluster identity of the node under test, and stubID
// that of the nodes it calls.
var clientID, stubID = clustertlstest.Identity("w1", clustertlstest.Secret), clustertlstest.Identity("stub", clustertlstest.Secret)

// closedAddr is a loopback address nothing listens on: a killed leader.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// stub serves h on loopback as a node of the test cluster does (TLS with
// its certificate, a node's client certificate verified if given), and
// returns its host:port.
func stub(t *testing.T, h http.Handler) string {
	t.Helper()
	addr, _ := countingStub(t, h)
	return addr
}

// countingStub is stub, also counting the connections clients open.
func countingStub(t *testing.T, h http.Handler) (string, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	s := httptest.NewUnstartedServer(h)
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.TLS = stubID.ServerConfig(clustertls.ProtoHTTP, false)
	s.StartTLS()
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "https://"), &conns
}

// node serves a real Server over leader (and worker, if not nil).
func node(t *testing.T, leader scheduler.Forwarder, workerID func(worker.Assignment) error) string {
	srv := &Server{Leader: leader}
	if workerID != nil {
		srv.Worker = acceptFunc(workerID)
	}
	return stub(t, srv)
}

type acceptFunc func(worker.Assignment) error

func (f acceptFunc) Accept(a worker.Assignment) error { return f(a) }

// fakeLeader is a scheduler.Forwarder that records its calls; a nil
// field answers as a leader that accepts everything. Its batches answer
// each item as the single call does; it takes no release or backfill.
type fakeLeader struct {
	mu    sync.Mutex
	calls []string

	renew    func(attempt, node string) (worker.RenewReply, error)
	complete func(replicated.Completion) error
	note     func(attempt string) error
}

func (f *fakeLeader) record(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeLeader) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeLeader) SetJobs(_ context.Context, specs []jobs.Spec, source string, scope []string) (string, error) {
	names := []string{}
	for _, s := range specs {
		names = append(names, s.Name+":"+strings.Join(s.Schedules, "|"))
	}
	f.record("set_jobs %s from %s", strings.Join(names, ","), source)
	return "hash-" + source, nil
}
func (f *fakeLeader) SetJobsChanges(_ context.Context, ch scheduler.JobChanges, source string) (string, int, error) {
	names := []string{}
	for _, s := range ch.Upsert {
		names = append(names, s.Name)
	}
	f.record("set_jobs_changes against %s: %s, removing %s, from %s", ch.Base, strings.Join(names, ","), strings.Join(ch.Remove, ","), source)
	switch ch.Base {
	case "stale":
		return "", 0, fmt.Errorf("base: %w", fsm.ErrJobsDiffBase)
	case "unchecked":
		return "", 0, scheduler.ErrChangesNeedSet
	case "bad":
		return "", 0, fmt.Errorf("bad job: %w", jobs.ErrInvalidConfig)
	}
	return "hash-" + source, 7, nil
}
func (f *fakeLeader) TriggerAt(_ context.Context, job string, force bool, at time.Time) (jobs.Run, error) {
	f.record("trigger %s force=%v at %s", job, force, at.Format(time.RFC3339Nano))
	if job == "nope" {
		return jobs.Run{}, fmt.Errorf("trigger %s: %w", job, jobs.ErrUnknownJob)
	}
	return jobs.Run{ID: job + "@manual", Job: job, State: jobs.Pending}, nil
}
func (f *fakeLeader) Pause(_ context.Context, job string, paused bool) error {
	f.record("pause %s %v", job, paused)
	return nil
}
func (f *fakeLeader) Started(_ context.Context, attempt string, at time.Time) error {
	f.record("started %s at %s", attempt, at.Format(time.RFC3339Nano))
	return nil
}
func (f *fakeLeader) Complete(_ context.Context, c replicated.Completion) error {
	f.record("complete %s %s exit=%d store=%s error=%q", c.Attempt, c.State, *c.ExitCode, c.StoreOutcome, c.Error)
	if f.complete != nil {
		return f.complete(c)
	}
	return nil
}
func (f *fakeLeader) Note(_ context.Context, attempt, kind, node, detail string) error {
	f.record("note %s %s %s %q", attempt, kind, node, detail)
	if f.note != nil {
		return f.note(attempt)
	}
	return nil
}
func (f *fakeLeader) Audit(_ context.Context, kind, node, detail string) error {
	f.record("audit %s %s %q", kind, node, detail)
	return nil
}
func (f *fakeLeader) Renew(_ context.Context, attempt, node string) (worker.RenewReply, error) {
	f.record("renew %s %s", attempt, node)
	if f.renew != nil {
		return f.renew(attempt, node)
	}
	return worker.RenewReply{Held: true, TTL: jobs.Duration(2 * time.Second)}, nil
}

func (f *fakeLeader) CompleteMany(ctx context.Context, cs []replicated.Completion) ([]error, error) {
	errs := make([]error, len(cs))
	for i, c := range cs {
		errs[i] = f.Complete(ctx, c)
	}
	return errs, nil
}
func (f *fakeLeader) RenewMany(ctx context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	out := make([]worker.RenewReply, len(rs))
	for i, r := range rs {
		reply, err := f.Renew(ctx, r.Attempt, node)
		if err != nil {
			return nil, err
		}
		out[i] = reply
	}
	return out, nil
}

// errNotImplemented answers the calls no test here makes of a fakeLeader.
var errNotImplemented = errors.New("not implemented by the fake")

func (f *fakeLeader) Release(context.Context, string, string, string) (scheduler.Released, error) {
	return scheduler.Released{}, fmt.Errorf("release: %w", errNotImplemented)
}
func (f *fakeLeader) Backfill(context.Context, fsm.BackfillRequest) (fsm.BackfillResult, error) {
	return fsm.BackfillResult{}, fmt.Errorf("backfill: %w", errNotImplemented)
}

func (f *fakeLeader) ACL(context.Context, acl.Cmd) error {
	return fmt.Errorf("acl: %w", errNotImplemented)
}

// notLeader answers every call as a follower does.
func notLeader() *fakeLeader {
	err := fmt.Errorf("renew: %w", jobs.ErrNotLeader)
	return &fakeLeader{
		renew: func(string, string) (worker.RenewReply, error) { return worker.RenewReply{}, err },
		note:  func(string) error { return err },
	}
}

// serverStub answers /api/v1/status as a server whose Raft knows that
// leader leads at leaderHTTP.
func serverStub(t *testing.T, leader, leaderHTTP string) string {
	return stub(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := wire.Status{Leader: leader, Members: []wire.MemberStatus{{Member: election.Member{Name: leader, Meta: election.Meta{HTTPAddr: leaderHTTP}}}}}
		json.NewEncoder(w).Encode(st)
	}))
}

// A worker whose gossip still names a killed leader finds the new one by
// asking the servers, within the same renewal: the lease must not run out
// while gossip catches up with the election.
func TestClient_RenewFindsNewLeaderWhenGossipNamesDeadOne(t *testing.T) {
	leader := &fakeLeader{}
	newLeader := node(t, leader, nil)
	dead := closedAddr(t)
	c := &Client{
		TLS:        clientID,
		Self:       "w1",
		LeaderHTTP: func() (string, error) { return dead, nil },
		Servers:    func() []string { return []string{closedAddr(t), serverStub(t, "n2", newLeader)} },
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	reply, err := c.Renew(ctx, "job@1.1", "w1")
	if err != nil || !reply.Held {
		t.Fatalf("renew with gossip naming a dead leader: %+v, %v; want held through the servers' leader", reply, err)
	}
	if got := leader.Calls(); len(got) != 1 {
		t.Errorf("the new leader saw %q, want one renewal", got)
	}
}

// A node that answers "not the leader" is not asked again in the same call:
// the servers are.
func TestClient_RenewAsksServersWhenHintSaysNotLeader(t *testing.T) {
	leader, follower := &fakeLeader{}, notLeader()
	c := &Client{
		TLS:        clientID,
		LeaderHTTP: func() (string, error) { return node(t, follower, nil), nil },
		Servers:    func() []string { return []string{serverStub(t, "n2", node(t, leader, nil))} },
	}
	reply, err := c.Renew(t.Context(), "job@1.1", "w1")
	if err != nil || !reply.Held || len(leader.Calls()) != 1 || len(follower.Calls()) != 1 {
		t.Fatalf("renew via a follower: %+v, %v, calls at the leader %q, at the follower %q; want held, one each", reply, err, leader.Calls(), follower.Calls())
	}
}

// An answer from the leader itself is final: a refusal is not retried
// elsewhere, and no server is asked.
func TestClient_LeaderRefusalIsNotRetriedElsewhere(t *testing.T) {
	leader := &fakeLeader{renew: func(a, _ string) (worker.RenewReply, error) {
		return worker.RenewReply{}, fmt.Errorf("renew %s: %w", a, jobs.ErrInvalidConfig)
	}}
	var asked atomic.Int32
	c := &Client{
		TLS:        clientID,
		LeaderHTTP: func() (string, error) { return node(t, leader, nil), nil },
		Servers:    func() []string { asked.Add(1); return nil },
	}
	_, err := c.Renew(t.Context(), "job@1.1", "w1")
	var re *errcode.RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusBadRequest || !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Fatalf("renew refused by the leader: %v, want its 400 standing for ErrInvalidConfig", err)
	}
	if asked.Load() != 0 {
		t.Errorf("servers asked %d times after the leader answered", asked.Load())
	}
}

// With no leader anywhere, the error says so rather than naming an address.
func TestClient_NoLeaderAnywhere(t *testing.T) {
	c := &Client{
		TLS:        clientID,
		LeaderHTTP: func() (string, error) { return "", election.ErrNoLeader },
		Servers:    func() []string { return []string{closedAddr(t)} },
	}
	if _, err := c.Renew(t.Context(), "job@1.1", "w1"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("renew with no leader: %v, want ErrNoLeader", err)
	}
}

// A call that first meets a follower ("not the leader") and then the
// leader is made once at the leader and reported as done: the follower's
// answer does not stick to the leader's.
func TestClient_CallAfterFollowerAnswersNotLeader(t *testing.T) {
	leader, follower := &fakeLeader{}, notLeader()
	c := &Client{
		TLS:        clientID,
		LeaderHTTP: func() (string, error) { return node(t, follower, nil), nil },
		Servers:    func() []string { return []string{serverStub(t, "n2", node(t, leader, nil))} },
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := c.Note(ctx, "job@1.1", "suspect", "w1", "renewal late")
	if err != nil || len(leader.Calls()) != 1 {
		t.Fatalf("note via a follower: %v, leader saw %q; want done once", err, leader.Calls())
	}
}

// A leader that takes the connection but never answers (paused, or cut
// off) uses up only half of a renewal's time: the rest goes to the leader
// the servers name.
func TestClient_RenewDoesNotWaitOutAHungLeader(t *testing.T) {
	leader := &fakeLeader{}
	hung := stub(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server notices a hang-up only once the body is read
		<-r.Context().Done()
	}))
	c := &Client{
		TLS:        clientID,
		LeaderHTTP: func() (string, error) { return hung, nil },
		Servers:    func() []string { return []string{serverStub(t, "n2", node(t, leader, nil))} },
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	reply, err := c.Renew(ctx, "job@1.1", "w1")
	if err != nil || !reply.Held || len(leader.Calls()) != 1 {
		t.Fatalf("renew with a hung leader in gossip: %+v, %v; want held by the servers' leader", reply, err)
	}
}

// Calls go over TLS to a node of the cluster, and, where gossip names the
// node at an address, to that node: a node of the cluster answering at an
// address gossip gives another, or a stranger, is not called.
func TestClient_ChecksThePeer(t *testing.T) {
	leader := &fakeLeader{}
	addr := node(t, leader, nil) // serves as "stub"
	stranger := httptest.NewUnstartedServer(&Server{Leader: leader})
	stranger.Config.ErrorLog = log.New(io.Discard, "", 0)
	stranger.TLS = clustertlstest.Identity("stub", []byte("another-cluster-secret-0123456789abcdef")).ServerConfig(clustertls.ProtoHTTP, false)
	stranger.StartTLS()
	defer stranger.Close()
	for _, tc := range []struct {
		name   string
		addr   string
		nameAt string
		ok     bool
	}{
		{"the node gossip names", addr, "stub", true},
		{"an address gossip does not know", addr, "", true},
		{"another node than gossip names", addr, "n2", false},
		{"a node of another cluster", strings.TrimPrefix(stranger.URL, "https://"), "stub", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{
				TLS: clientID, LeaderHTTP: func() (string, error) { return tc.addr, nil },
				NameAt: func(string) string { return tc.nameAt },
			}
			_, err := c.Renew(t.Context(), "job@1.1", "w1")
			if (err == nil) != tc.ok {
				t.Fatalf("renew: %v, want success %v", err, tc.ok)
			}
			var re *errcode.RemoteError
			if err != nil && errors.As(err, &re) {
				t.Errorf("a refused handshake reads as the leader's answer: %v", err)
			}
		})
	}
	if n := len(leader.Calls()); n != 2 {
		t.Errorf("the leader answered %d calls, want the 2 that reached the right node", n)
	}
	// Without an identity nothing is sent in the clear.
	c := &Client{LeaderHTTP: func() (string, error) { return addr, nil }}
	if _, err := c.Renew(t.Context(), "job@1.1", "w1"); err == nil || !strings.Contains(err.Error(), "no cluster TLS identity") {
		t.Errorf("renew without an identity: %v", err)
	}
}

// A 404 that is not the leader's word (a proxy's page, a server that does
// not serve this endpoint) does not make a worker give up its completion:
// it is retried until the leader answers or time runs out, and never
// reads as jobs.ErrNotFound. The leader's own "no such attempt" does, at
// once.
func TestClient_TransportFailureIsNotADomainAnswer(t *testing.T) {
	exit := 0
	comp := replicated.Completion{Attempt: "job@1.1", State: jobs.Succeeded, ExitCode: &exit, EndedAt: time.Now()}
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"a proxy's page", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "<html><body><h1>404 Not Found</h1>nginx</body></html>")
		}},
		{"Go's default 404", http.NotFound},
		{"an older node's error", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error": "POST /internal/v1/complete: not found"}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			wrong := stub(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				tc.h(w, r)
			}))
			c := &Client{TLS: clientID, LeaderHTTP: func() (string, error) { return wrong, nil }}
			// Long enough for more than one try after a TLS handshake on
			// a busy machine (600 ms once left room for only one).
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			err := c.Complete(ctx, comp)
			if err == nil || errors.Is(err, jobs.ErrNotFound) || errors.Is(err, jobs.ErrInvalidConfig) {
				t.Fatalf("complete at %s: %v; want a transport failure, not a domain answer", tc.name, err)
			}
			var ua *errcode.UnexpectedAnswer
			if !errors.As(err, &ua) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("complete: %v; want the deadline, after an unexpected answer", err)
			}
			if hits.Load() < 2 {
				t.Errorf("asked %d times, want retries until the deadline", hits.Load())
			}
		})
	}

	// The deadline may cut calls short: the answer before them is still
	// what the error says.
	var hits atomic.Int32
	cut := stub(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) > 1 {
			<-r.Context().Done() // the client gives up at its deadline
			return
		}
		http.NotFound(w, r)
	}))
	c := &Client{TLS: clientID, LeaderHTTP: func() (string, error) { return cut, nil }}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err := c.Complete(ctx, comp)
	if ua := (*errcode.UnexpectedAnswer)(nil); !errors.As(err, &ua) || !errors.Is(err, context.DeadlineExceeded) || hits.Load() < 2 {
		t.Errorf("complete, its calls after the first cut by the deadline: %v after %d calls; want the deadline, after the first call's unexpected answer", err, hits.Load())
	}

	leader := &fakeLeader{complete: func(c replicated.Completion) error {
		return fmt.Errorf("attempt %s: %w", c.Attempt, jobs.ErrNotFound)
	}}
	c = &Client{TLS: clientID, LeaderHTTP: func() (string, error) { return node(t, leader, nil), nil }}
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := c.Complete(ctx, comp); !errors.Is(err, jobs.ErrNotFound) || ctx.Err() != nil {
		t.Errorf("the leader's not_found: %v; want jobs.ErrNotFound at once", err)
	}
	if n := len(leader.Calls()); n != 1 {
		t.Errorf("the leader was asked %d times, want once: its answer is final", n)
	}
}

// Calls reuse their TLS connection, those without an answer body to
// decode too: a connection whose answer is left unread is closed, and
// every call would pay a new handshake.
func TestClient_ReusesConnections(t *testing.T) {
	addr, conns := countingStub(t, &Server{Leader: &fakeLeader{}, Worker: acceptFunc(func(worker.Assignment) error { return nil })})
	c := &Client{Self: "w1", TLS: clientID, LeaderHTTP: func() (string, error) { return addr, nil }, NodeHTTP: func(string) (string, error) { return addr, nil }}
	for i := range 10 {
		if err := c.Started(t.Context(), fmt.Sprintf("report@1.%d", i+1), time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := c.Dispatch(t.Context(), "w2", worker.Assignment{Attempt: jobs.Attempt{ID: "report@1.1", Number: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Renew(t.Context(), "report@1.1", "w1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("30 sequential calls opened %d connections, want 1", n)
	}
}

// Calls in flight at once share one connection (HTTP/2): a worker
// reporting hundreds of completions to a busy leader must not open a
// connection, and pay a TLS handshake, for each.
func TestClient_ConcurrentCallsShareOneConnection(t *testing.T) {
	const calls = 40
	var arrived atomic.Int32
	all := make(chan struct{})
	leader := &fakeLeader{complete: func(replicated.Completion) error {
		if arrived.Add(1) == calls {
			close(all)
		}
		// Every call stays in flight until all have arrived, so over
		// HTTP/1.1 each would need a connection of its own.
		select {
		case <-all:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("not every call arrived while this one was in flight")
		}
	}}
	addr, conns := countingStub(t, &Server{Leader: leader, Worker: acceptFunc(func(worker.Assignment) error { return nil })})
	c := &Client{Self: "w1", TLS: clientID, LeaderHTTP: func() (string, error) { return addr, nil }}
	// One call first, so the rest find the connection made.
	if err := c.Started(t.Context(), "report@1.1", time.Now()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	exit := 0
	for i := range calls {
		wg.Go(func() {
			errs <- c.Complete(ctx, replicated.Completion{Attempt: fmt.Sprintf("report@1.%d", i+1), Node: "w1", State: jobs.Succeeded, ExitCode: &exit})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d calls in flight at once opened %d connections, want 1", calls+1, n)
	}
}

// RenewMany renews several attempts in one call; a leader of a version
// without the call (it answers no_route) gets one renewal each instead.
func TestClient_RenewMany(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old leader %v", old), func(t *testing.T) {
			leader, c := olderLeader(t, old, pathRenewMany)
			replies, err := c.RenewMany(t.Context(), "w1", []worker.Renewal{{Attempt: "a@1.1", Confirming: true}, {Attempt: "b@1.1", Start: true, Confirming: true}})
			if err != nil || len(replies) != 2 || !replies[0].Held || !replies[1].Held {
				t.Fatalf("RenewMany = %+v, %v; want two held", replies, err)
			}
			if got := leader.Calls(); len(got) != 2 {
				t.Errorf("the leader saw %q, want a renewal of each attempt", got)
			}
		})
	}
}

// olderLeader is a leader and a client of it; if old, a leader of a
// version without path, which it answers no_route.
func olderLeader(t *testing.T, old bool, path string) (*fakeLeader, *Client) {
	t.Helper()
	leader := &fakeLeader{}
	srv := &Server{Leader: leader}
	h := http.Handler(srv)
	if old {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == Prefix+path {
				srv.fail(w, r, fmt.Errorf("%s: %w", r.URL.Path, wire.ErrNoRoute))
				return
			}
			srv.ServeHTTP(w, r)
		})
	}
	addr := stub(t, h)
	return leader, &Client{TLS: clientID, Self: "w1", LeaderHTTP: func() (string, error) { return addr, nil }, Servers: func() []string { return nil }}
}

// batchingLeader takes renewals in batches and confirms the starts asked.
type batchingLeader struct {
	fakeLeader
	got []worker.Renewal
}

func (b *batchingLeader) RenewMany(_ context.Context, _ string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, rs...)
	out := make([]worker.RenewReply, len(rs))
	for i, r := range rs {
		out[i] = worker.RenewReply{Held: true, Started: r.Start}
	}
	return out, nil
}

// A batch's start confirmations cross the wire both ways: which attempts
// ask, that their worker confirms starts, which it holds on the short
// lease before the start, and the leader's Started. A worker that does
// not confirm starts (an older one) sends no starts.
func TestClient_RenewManyCarriesStarts(t *testing.T) {
	leader := &batchingLeader{}
	addr := stub(t, &Server{Leader: leader})
	c := &Client{TLS: clientID, Self: "w1", LeaderHTTP: func() (string, error) { return addr, nil }, Servers: func() []string { return nil }}
	sent := []worker.Renewal{{Attempt: "a@1.1", Confirming: true, PreStart: true}, {Attempt: "b@1.1", Start: true, Confirming: true}, {Attempt: "c@1.1"}}
	for _, batch := range [][]worker.Renewal{sent[:2], sent[2:]} {
		replies, err := c.RenewMany(t.Context(), "w1", batch)
		if err != nil || len(replies) != len(batch) {
			t.Fatalf("RenewMany(%+v) = %+v, %v", batch, replies, err)
		}
		for i, r := range replies {
			if !r.Held || r.Started != batch[i].Start {
				t.Errorf("reply to %+v: %+v; want held, started %v", batch[i], r, batch[i].Start)
			}
		}
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	if !slices.Equal(leader.got, sent) {
		t.Errorf("the leader got %+v, want %+v", leader.got, sent)
	}
}

// A leader of log version 4 knows renew_many but not its starts, and
// refuses the unknown field: the renewals are sent again without them,
// and arrive as an older worker's (no Confirming), which a leader never
// takes for a start that did not happen.
func TestClient_RenewManyToAnOlderLeader(t *testing.T) {
	leader := &batchingLeader{}
	srv := &Server{Leader: leader}
	refused := 0
	addr := stub(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == Prefix+pathRenewMany && bytes.Contains(body, []byte(`"starts"`)) {
			refused++
			srv.fail(w, r, fmt.Errorf(`%w: json: unknown field "starts"`, wire.ErrBadRequest))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		srv.ServeHTTP(w, r)
	}))
	c := &Client{TLS: clientID, Self: "w1", LeaderHTTP: func() (string, error) { return addr, nil }, Servers: func() []string { return nil }}
	replies, err := c.RenewMany(t.Context(), "w1", []worker.Renewal{{Attempt: "a@1.1", Start: true, Confirming: true}})
	if err != nil || len(replies) != 1 || !replies[0].Held || replies[0].Started {
		t.Fatalf("RenewMany = %+v, %v; want held, without a start confirmation", replies, err)
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	if want := []worker.Renewal{{Attempt: "a@1.1"}}; refused != 1 || !slices.Equal(leader.got, want) {
		t.Errorf("refused %d, then the leader got %+v; want 1 refusal, then %+v", refused, leader.got, want)
	}
}

// CompleteMany reports several completions in one call and brings back
// each one's own answer, so that a worker gives up on an attempt the
// leader does not know and retries one it could not record; a leader of
// a version without the call (it answers no_route) gets one call each.
func TestClient_CompleteMany(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old leader %v", old), func(t *testing.T) {
			leader := &fakeLeader{complete: func(c replicated.Completion) error {
				switch c.Attempt {
				case "gone@1.1":
					return fmt.Errorf("complete %s: %w", c.Attempt, jobs.ErrNotFound)
				case "busy@1.1":
					return fmt.Errorf("complete %s: %w", c.Attempt, jobs.ErrNotLeader)
				}
				return nil
			}}
			srv := &Server{Leader: leader}
			var batches atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == Prefix+pathCompleteMany {
					batches.Add(1)
					if old {
						srv.fail(w, r, fmt.Errorf("%s: %w", r.URL.Path, wire.ErrNoRoute))
						return
					}
				}
				srv.ServeHTTP(w, r)
			})
			addr := stub(t, h)
			c := &Client{TLS: clientID, Self: "w1", LeaderHTTP: func() (string, error) { return addr, nil }, Servers: func() []string { return nil }}
			exit := 0
			var cs []replicated.Completion
			for _, id := range []string{"ok@1.1", "gone@1.1", "busy@1.1"} {
				cs = append(cs, replicated.Completion{Attempt: id, Node: "w1", State: jobs.Succeeded, ExitCode: &exit})
			}
			ctx := t.Context()
			if old {
				// An older leader's "not leader" is retried until ctx ends,
				// which leaves the first calls room on a busy machine (a TLS
				// handshake under the race detector there took over 500 ms).
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
			}
			errs, err := c.CompleteMany(ctx, cs)
			if err != nil || len(errs) != 3 {
				t.Fatalf("CompleteMany = %v, %v; want three answers", errs, err)
			}
			if errs[0] != nil {
				t.Errorf("ok@1.1: %v, want recorded", errs[0])
			}
			if !errors.Is(errs[1], jobs.ErrNotFound) {
				t.Errorf("gone@1.1: %v, want not found", errs[1])
			}
			if !errors.Is(errs[2], jobs.ErrNotLeader) || errors.Is(errs[2], jobs.ErrNotFound) {
				t.Errorf("busy@1.1: %v, want not leader", errs[2])
			}
			if n := batches.Load(); n != 1 {
				t.Errorf("%d complete_many calls, want 1", n)
			}
			if got := leader.Calls(); !old && len(got) != 3 {
				t.Errorf("the leader saw %q, want each completion once", got)
			}
		})
	}
}

// A leader of log version 7 knows starts but not short leases before
// them, and refuses the unknown field: the renewals are sent again
// without it, still asking for their starts (that leader gives them the
// whole lease, which the worker, counting the short one, never overstays).
func TestClient_RenewManyToALeaderWithoutShortLeases(t *testing.T) {
	leader := &batchingLeader{}
	srv := &Server{Leader: leader}
	refused := 0
	addr := stub(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == Prefix+pathRenewMany && bytes.Contains(body, []byte(`"pre_start"`)) {
			refused++
			srv.fail(w, r, fmt.Errorf(`%w: json: unknown field "pre_start"`, wire.ErrBadRequest))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		srv.ServeHTTP(w, r)
	}))
	c := &Client{TLS: clientID, Self: "w1", LeaderHTTP: func() (string, error) { return addr, nil }, Servers: func() []string { return nil }}
	replies, err := c.RenewMany(t.Context(), "w1", []worker.Renewal{{Attempt: "a@1.1", Start: true, Confirming: true, PreStart: true}})
	if err != nil || len(replies) != 1 || !replies[0].Held || !replies[0].Started {
		t.Fatalf("RenewMany = %+v, %v; want held and started", replies, err)
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	if want := []worker.Renewal{{Attempt: "a@1.1", Start: true, Confirming: true}}; refused != 1 || !slices.Equal(leader.got, want) {
		t.Errorf("refused %d, then the leader got %+v; want 1 refusal, then %+v", refused, leader.got, want)
	}
}

// A trigger carries the time it was asked; a leader of a version without
// pathTriggerAt (it answers no_route, and refuses the field "at" on
// pathTrigger) is asked through pathTrigger without it, and triggers at
// its own time.
func TestClient_TriggerAt(t *testing.T) {
	at := time.Date(2026, 8, 1, 9, 0, 0, 123_000_000, time.UTC)
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old leader %v", old), func(t *testing.T) {
			leader, c := olderLeader(t, old, pathTriggerAt)
			run, err := c.TriggerAt(t.Context(), "report", false, at)
			if err != nil || run.ID != "report@manual" {
				t.Fatalf("TriggerAt = %+v, %v", run, err)
			}
			want := "trigger report force=false at 2026-08-01T09:00:00.123Z"
			if old {
				want = "trigger report force=false at 0001-01-01T00:00:00Z"
			}
			if got := leader.Calls(); len(got) != 1 || got[0] != want {
				t.Errorf("the leader saw %q, want %q", got, want)
			}
		})
	}
}

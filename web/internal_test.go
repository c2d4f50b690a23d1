package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

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

// leaderStub answers renewals like a leader that holds every lease, and
// counts them.
func leaderStub(t *testing.T, renewals *atomic.Int32) string {
	return stub(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/internal/v1/renew" {
			http.NotFound(w, r)
			return
		}
		renewals.Add(1)
		json.NewEncoder(w).Encode(scheduler.RenewReply{Held: true})
	})
}

// serverStub answers /api/v1/status as a server whose Raft knows that
// leader leads at leaderHTTP.
func serverStub(t *testing.T, leader, leaderHTTP string) string {
	return stub(t, func(w http.ResponseWriter, r *http.Request) {
		st := Status{Leader: leader, Members: []MemberStatus{{Member: election.Member{Name: leader, Meta: election.Meta{HTTPAddr: leaderHTTP}}}}}
		json.NewEncoder(w).Encode(st)
	})
}

// testSecret is the cluster secret of the web tests' nodes.
var testSecret = []byte("web-test-cluster-secret-0123456789abcdef")

// testPeerID is the cluster identity of the node under test, and
// stubID that of the nodes it calls.
var testPeerID, stubID = mustIdentity("w1", testSecret), mustIdentity("stub", testSecret)

func mustIdentity(name string, secret []byte) *clustertls.Identity {
	id, err := clustertls.Load(clustertls.Config{NodeName: name, Secret: secret})
	if err != nil {
		panic(err)
	}
	return id
}

// stub serves h on loopback, as a node of the test cluster does (TLS with
// its certificate), and returns its host:port.
func stub(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.TLS = stubID.ServerConfig(clustertls.ProtoHTTP, false)
	s.StartTLS()
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "https://")
}

// A worker whose gossip still names a killed leader finds the new one by
// asking the servers, within the same renewal: the lease must not run out
// while gossip catches up with the election.
func TestPeer_RenewFindsNewLeaderWhenGossipNamesDeadOne(t *testing.T) {
	var renewals atomic.Int32
	newLeader := leaderStub(t, &renewals)
	dead := closedAddr(t)
	p := &Peer{
		TLS:        testPeerID,
		Self:       "w1",
		LeaderHTTP: func() (string, error) { return dead, nil },
		Servers:    func() []string { return []string{closedAddr(t), serverStub(t, "n2", newLeader)} },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := p.Renew(ctx, "job@1.1", "w1")
	if err != nil || !reply.Held {
		t.Fatalf("renew with gossip naming a dead leader: %+v, %v; want held through the servers' leader", reply, err)
	}
	if n := renewals.Load(); n != 1 {
		t.Errorf("the new leader saw %d renewals, want 1", n)
	}
}

// A node that answers "not the leader" is not asked again in the same call:
// the servers are.
func TestPeer_RenewAsksServersWhenHintSaysNotLeader(t *testing.T) {
	var renewals atomic.Int32
	newLeader := leaderStub(t, &renewals)
	follower := stub(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"not the leader"}`, http.StatusServiceUnavailable)
	})
	p := &Peer{
		TLS:        testPeerID,
		LeaderHTTP: func() (string, error) { return follower, nil },
		Servers:    func() []string { return []string{serverStub(t, "n2", newLeader)} },
	}
	reply, err := p.Renew(context.Background(), "job@1.1", "w1")
	if err != nil || !reply.Held || renewals.Load() != 1 {
		t.Fatalf("renew via a follower: %+v, %v, %d renewals at the leader; want held, one renewal", reply, err, renewals.Load())
	}
}

// An answer from the leader itself is final: a refusal is not retried
// elsewhere, and no server is asked.
func TestPeer_LeaderRefusalIsNotRetriedElsewhere(t *testing.T) {
	leader := stub(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
	})
	var asked atomic.Int32
	p := &Peer{
		TLS:        testPeerID,
		LeaderHTTP: func() (string, error) { return leader, nil },
		Servers:    func() []string { asked.Add(1); return nil },
	}
	_, err := p.Renew(context.Background(), "job@1.1", "w1")
	var he *httpError
	if !errors.As(err, &he) || he.code != http.StatusBadRequest {
		t.Fatalf("renew refused by the leader: %v, want its 400", err)
	}
	if asked.Load() != 0 {
		t.Errorf("servers asked %d times after the leader answered", asked.Load())
	}
}

// With no leader anywhere, the error says so rather than naming an address.
func TestPeer_NoLeaderAnywhere(t *testing.T) {
	p := &Peer{
		TLS:        testPeerID,
		LeaderHTTP: func() (string, error) { return "", election.ErrNoLeader },
		Servers:    func() []string { return []string{closedAddr(t)} },
	}
	if _, err := p.Renew(context.Background(), "job@1.1", "w1"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("renew with no leader: %v, want ErrNoLeader", err)
	}
}

// A forwarded command that first meets a follower ("not_leader" in a 200)
// and then the leader is applied once and reported as applied: the
// follower's answer must not stick to the leader's.
func TestPeer_ForwardAfterFollowerAnswersNotLeader(t *testing.T) {
	var applies atomic.Int32
	leader := stub(t, func(w http.ResponseWriter, r *http.Request) {
		applies.Add(1)
		json.NewEncoder(w).Encode(leaderReply{})
	})
	follower := stub(t, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(leaderReply{Code: "not_leader", Message: "not the leader"})
	})
	p := &Peer{
		TLS:        testPeerID,
		LeaderHTTP: func() (string, error) { return follower, nil },
		Servers:    func() []string { return []string{serverStub(t, "n2", leader)} },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.Note(ctx, "job@1.1", jobs.EventSuspect, "w1", "")
	if err != nil || applies.Load() != 1 {
		t.Fatalf("forward via a follower: %v, applied %d times; want applied once", err, applies.Load())
	}
}

// A leader that takes the connection but never answers (paused, or cut
// off) uses up only half of a renewal's time: the rest goes to the leader
// the servers name.
func TestPeer_RenewDoesNotWaitOutAHungLeader(t *testing.T) {
	var renewals atomic.Int32
	newLeader := leaderStub(t, &renewals)
	hung := stub(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server notices a hang-up only once the body is read
		<-r.Context().Done()
	})
	p := &Peer{
		TLS:        testPeerID,
		LeaderHTTP: func() (string, error) { return hung, nil },
		Servers:    func() []string { return []string{serverStub(t, "n2", newLeader)} },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reply, err := p.Renew(ctx, "job@1.1", "w1")
	if err != nil || !reply.Held || renewals.Load() != 1 {
		t.Fatalf("renew with a hung leader in gossip: %+v, %v; want held by the servers' leader", reply, err)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// An operator's command sent to a node during an election waits for the
// leader instead of failing: the node's status names no leader for its
// first two answers, then n1 at 127.0.0.1:7001.
func TestClient_AtLeaderWaitsOutAnElection(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := wire.Status{RaftState: "Follower"}
		if asked.Add(1) > 2 {
			st.Leader = "n1"
			st.Members = []wire.MemberStatus{{Member: election.Member{Name: "n1", Meta: election.Meta{HTTPAddr: "127.0.0.1:7001"}}}}
		}
		json.NewEncoder(w).Encode(st)
	}))
	defer srv.Close()
	var errOut bytes.Buffer
	c := &client{base: srv.URL, out: &bytes.Buffer{}, errOut: &errOut, http: srv.Client()}
	l, err := c.atLeader(t.Context())
	if err != nil {
		t.Fatalf("atLeader: %v (%s)", err, errOut.String())
	}
	if l.base != "http://127.0.0.1:7001" || asked.Load() != 3 {
		t.Errorf("atLeader sent to %s after %d status reads; want http://127.0.0.1:7001 after 3", l.base, asked.Load())
	}
	if !strings.Contains(errOut.String(), "knows no leader yet; waiting") {
		t.Errorf("stderr %q: want it to say it waits for an election", errOut.String())
	}
}

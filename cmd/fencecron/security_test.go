package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

// metric reads one unlabelled gauge from a node's public /metrics, as an
// attacker who can reach the port would.
func metric(t *testing.T, n *localcluster.Node, name string) uint64 {
	t.Helper()
	body, err := httpGet(n.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s %s: %v", n.Name, name, err)
			}
			return uint64(f)
		}
	}
	t.Fatalf("%s: no %s in /metrics", n.Name, name)
	return 0
}

const securityJobs = `
  - name: tick
    schedule: "@every 1h"
    shell: 'echo tick'
    output: 'ticks/{{ .RunID }}.txt'
`

// An outsider with a plain hashicorp/raft TCP transport, who read the term
// and the last log index from a node's public /metrics, sends a follower
// an AppendEntries at term+1 carrying a set_jobs entry, and the leader a
// heartbeat at term+100. Both are refused at the TLS handshake: no term
// moves, the job set stays, the forged job never runs.
func TestSecurity_ForgedRaftMessagesRefused(t *testing.T) {
	c := startCluster(t, localcluster.Options{Servers: 3, Profile: "fast", Jobs: securityJobs})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	var follower *localcluster.Node
	for _, n := range c.Servers() {
		if n != leader {
			follower = n
		}
	}
	waitFollowerOf(t, follower, leader.Name)
	st, err := follower.Status()
	if err != nil {
		t.Fatal(err)
	}
	jobSet := st.Jobs.Hash
	terms := map[string]uint64{}
	for _, n := range c.Servers() {
		terms[n.Name] = metric(t, n, "fencecron_raft_term")
	}
	term, last := terms[follower.Name], metric(t, follower, "fencecron_raft_last_log_index")

	marker := filepath.Join(t.TempDir(), "pwned")
	forgedJob := jobs.Spec{Name: "pwned", Schedules: []string{"@every 1s"}, Shell: "touch " + marker}
	forgedJob.Normalize()
	cmd, _ := json.Marshal(map[string]any{"op": "set_jobs", "set_jobs": map[string]any{"jobs": []jobs.Spec{forgedJob}, "source": "attacker", "at": time.Now()}})

	attacker, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 3*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(leader.Name), Addr: []byte(fmt.Sprintf("127.0.0.1:%d", leader.Raft))}
	forged := &raft.AppendEntriesRequest{
		RPCHeader: header, Term: term + 1, PrevLogEntry: last, PrevLogTerm: term, LeaderCommitIndex: last + 1,
		Entries: []*raft.Log{{Index: last + 1, Term: term + 1, Type: raft.LogCommand, Data: cmd}},
	}
	var resp raft.AppendEntriesResponse
	if err := attacker.AppendEntries(raft.ServerID(follower.Name), raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", follower.Raft)), forged, &resp); err == nil {
		t.Errorf("follower %s answered a forged AppendEntries: %+v", follower.Name, resp)
	}
	heartbeat := &raft.AppendEntriesRequest{RPCHeader: header, Term: terms[leader.Name] + 100, PrevLogEntry: last, PrevLogTerm: term}
	if err := attacker.AppendEntries(raft.ServerID(leader.Name), raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", leader.Raft)), heartbeat, &resp); err == nil {
		t.Errorf("leader %s answered a heartbeat at term+100: %+v", leader.Name, resp)
	}

	// The cluster goes on: a real run is granted, runs and is reported,
	// all after the attack.
	run := trigger(t, follower, "tick")
	waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
		if r.State != jobs.Succeeded {
			return fmt.Errorf("state %s", r.State)
		}
		return nil
	})
	for _, n := range c.Servers() {
		if got := metric(t, n, "fencecron_raft_term"); got != terms[n.Name] {
			t.Errorf("%s: fencecron_raft_term %d, was %d before the attack", n.Name, got, terms[n.Name])
		}
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.Jobs.Hash != jobSet || st.Leader != leader.Name {
			t.Errorf("%s: job set %s led by %s; before the attack %s led by %s", n.Name, st.Jobs.Hash, st.Leader, jobSet, leader.Name)
		}
		var js struct{ Jobs []jobs.Spec }
		if err := n.GetJSON("/api/v1/jobs", &js); err != nil {
			t.Fatal(err)
		}
		for _, j := range js.Jobs {
			if j.Name != "tick" {
				t.Errorf("%s runs job %q", n.Name, j.Name)
			}
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the forged job ran")
	}
	if log := follower.LogTail(1 << 20); !strings.Contains(log, "refused a connection to the Raft port") {
		t.Errorf("the follower's log does not say it refused the outsider:\n%s", follower.LogTail(3000))
	}
}

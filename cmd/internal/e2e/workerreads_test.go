package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

// A worker node (server: false) applies no Raft log: asked for the
// replicated state, it says so with 421 and the leader's address, rather
// than an empty list that reads as "nothing ran"; the CLI prints that.
// The server it names answers the same request with the runs.
func TestWorker_ReadsOfStateSayWhereToAsk(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 1, Workers: 1, Jobs: `  - name: tick
    schedule: "@every 1s"
    shell: 'true'
`})
	a := agree(t, c, 30*time.Second)
	leader, worker := c.Node(a.Leader), c.Node("w1")
	var leaderHTTP string
	if err := localcluster.Until(30*time.Second, func() error {
		runs, err := leader.Runs("tick", 10)
		if err != nil || len(runs) == 0 {
			return fmt.Errorf("no runs yet (%v)", err)
		}
		st, err := worker.Status()
		if err != nil || st.Leader == "" {
			return fmt.Errorf("worker knows no leader yet (%v)", err)
		}
		for _, m := range st.Members {
			if m.Name == a.Leader {
				leaderHTTP = m.Meta.HTTPAddr
			}
		}
		if leaderHTTP == "" {
			return fmt.Errorf("leader's HTTP address not in gossip yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/runs", "/api/v1/jobs", "/api/v1/events", "/api/v1/skips", "/api/v1/jobs/tick/explain?at=2026-07-01T00:00:00Z", "/jobs"} {
		resp, err := http.Get(worker.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(b.String(), "is a worker (server: false)") || !strings.Contains(b.String(), leaderHTTP) {
			t.Errorf("GET %s on the worker: %d %s; want 421 naming the leader at %s", path, resp.StatusCode, b.String(), leaderHTTP)
		}
	}
	out, err := cli(t, "status", "-addr", addrOf(worker))
	if err != nil || !strings.Contains(out, "this node is a worker: it holds no replicated state; ask a server (the leader: "+leaderHTTP+")") || strings.Contains(out, "job set (none)") {
		t.Errorf("status against the worker: %v\n%s", err, out)
	}
	out, err = cli(t, "runs", "-addr", addrOf(worker))
	if err == nil || !strings.Contains(err.Error(), "holds no replicated state") {
		t.Errorf("runs against the worker: err %v, out %s; want it to say where to ask", err, out)
	}
	out, err = cli(t, "runs", "-addr", leaderHTTP, "tick")
	if err != nil || !strings.Contains(out, "tick@") {
		t.Errorf("runs against the leader it names: %v\n%s", err, out)
	}
	var runs []jobs.Run
	if runs, err = leader.Runs("tick", 1); err != nil || len(runs) != 1 {
		t.Errorf("leader's runs: %v %v", runs, err)
	}
}

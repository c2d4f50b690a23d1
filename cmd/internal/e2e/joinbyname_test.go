package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// TestCluster_JoinByNameAndNewAddress: nodes whose join lists name their
// peers as localhost:PORT form a cluster; a server killed and started
// again at another address (127.0.0.3, as a pod rescheduled with a new IP)
// rejoins under its old name, and Raft's configuration follows it to the
// new address, so it votes again.
func TestCluster_JoinByNameAndNewAddress(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, JoinHost: "localhost"})
	for _, n := range c.Nodes {
		cfg, err := os.ReadFile(n.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(cfg), `"localhost:`) || strings.Contains(string(cfg), `"127.0.0.1:`) {
			t.Fatalf("%s's config does not join by name:\n%s", n.Name, cfg)
		}
	}
	a := agree(t, c, 30*time.Second)
	voters := func(n *localcluster.Node) error {
		st, err := n.Status()
		if err != nil {
			return err
		}
		if len(st.Voters) != 3 {
			return fmt.Errorf("%s sees voters %+v; want 3", n.Name, st.Voters)
		}
		return nil
	}
	if err := localcluster.Until(30*time.Second, func() error { return voters(c.Node(a.Leader)) }); err != nil {
		t.Fatal(err)
	}

	// Move a follower to 127.0.0.3: same name, data and ports.
	var moved *localcluster.Node
	for _, n := range c.Servers() {
		if n.Name != a.Leader {
			moved = n
		}
	}
	moved.Kill()
	cfg, err := os.ReadFile(moved.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	newCfg := strings.Replace(string(cfg), "bind: 127.0.0.1", "bind: 127.0.0.3", 1)
	if newCfg == string(cfg) {
		t.Fatalf("no bind line in %s's config:\n%s", moved.Name, cfg)
	}
	if err := os.WriteFile(moved.ConfigPath, []byte(newCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := moved.Start(); err != nil {
		t.Fatal(err)
	}
	wantRaft := fmt.Sprintf("127.0.0.3:%d", moved.Raft)
	err = localcluster.Until(60*time.Second, func() error {
		// Every other server's Raft configuration names the new address...
		for _, n := range c.Servers() {
			if n == moved {
				continue
			}
			st, err := n.Status()
			if err != nil {
				return err
			}
			found := false
			for _, v := range st.Voters {
				if v.ID == moved.Name {
					found = v.Address == wantRaft && v.Voter
				}
			}
			if !found || len(st.Voters) != 3 {
				return fmt.Errorf("%s: voters %+v; want 3, %s a voter at %s", n.Name, st.Voters, moved.Name, wantRaft)
			}
		}
		// ...and the moved node takes part at its new address: it knows
		// the leader the others know (it may have been elected itself).
		st, err := statusAt(fmt.Sprintf("http://127.0.0.3:%d", moved.HTTP))
		if err != nil {
			return err
		}
		other, err := c.Servers()[0].Status()
		if c.Servers()[0] == moved {
			other, err = c.Servers()[1].Status()
		}
		if err != nil {
			return err
		}
		if st.Leader == "" || st.Epoch == 0 || st.Leader != other.Leader || st.Epoch != other.Epoch {
			return fmt.Errorf("%s at 127.0.0.3: leader %q epoch %d; another server: leader %q epoch %d", moved.Name, st.Leader, st.Epoch, other.Leader, other.Epoch)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// statusAt reads GET /api/v1/status from a node's base URL.
func statusAt(base string) (wire.Status, error) {
	var st wire.Status
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(base + "/api/v1/status")
	if err != nil {
		return st, err
	}
	b, err := wire.ReadAnswer(resp)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

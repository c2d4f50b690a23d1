package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// buildWithLogVersion builds cmd/fencecron as a release whose log format
// is version v: an older binary, for the upgrade test.
func buildWithLogVersion(t *testing.T, v string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fencecron-log-v"+v)
	cmd := exec.Command("go", "build", "-o", path,
		"-ldflags", "-X github.com/fencecron/fencecron/scheduler/replicated.logVersionText="+v,
		"github.com/fencecron/fencecron/cmd/fencecron")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build (log version %s): %v\n%s", v, err, out)
	}
	return path
}

func readyz(n *localcluster.Node) (int, string, error) {
	resp, err := http.Get(n.URL() + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(bytes.TrimSpace(b)), nil
}

// A rolling upgrade caught half way: n3 runs an older binary (log format
// 1) beside two of this one (fsm.LogVersion). Once a newer server leads, it
// writes entries n3 cannot read: n3 stops applying there (it neither
// skips them nor applies what follows), fails /readyz saying why, logs it
// at error, does not lead; the others go on. Upgraded, n3 catches up on
// everything it did not apply and agrees with the cluster again.
func TestCluster_OlderBinaryStopsAtANewerEntry(t *testing.T) {
	t.Parallel()
	newBin := proctest.Binary(t)
	oldBin := buildWithLogVersion(t, "1")
	c, err := localcluster.Prepare(localcluster.Options{Binary: newBin, Dir: t.TempDir(), Servers: 3, Jobs: tickJobs})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if err := os.WriteFile(n.ConfigPath, []byte(c.Config(n)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n1, n2, n3 := c.Node("n1"), c.Node("n2"), c.Node("n3")
	n3.SetCommand(oldBin)
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, c)

	// Wait for a leader; if the old one leads, its entries (version 1)
	// apply on the newer servers too. Then make a newer one lead.
	newer := []*localcluster.Node{n1, n2}
	if err := localcluster.Until(40*time.Second, func() error {
		if _, err := localcluster.Agreed(newer); err == nil {
			return nil
		}
		if st, err := n3.Status(); err == nil && st.RaftState == "Leader" && st.Epoch > 0 {
			var js struct{ Info struct{ Hash string } }
			if n1.GetJSON("/api/v1/jobset", &js) != nil || js.Info.Hash == "" {
				return fmt.Errorf("n1 has not applied the old leader's job set yet")
			}
			t.Logf("the older n3 leads first; n1 applied its entries; restarting it so that a newer server leads")
			n3.Kill()
			if err := n3.Start(); err != nil {
				t.Fatal(err)
			}
		}
		return fmt.Errorf("no newer server leads yet")
	}); err != nil {
		t.Fatal(err)
	}
	a, _ := localcluster.Agreed(newer)
	leader := c.Node(a.Leader)

	// n3 stops at the first newer entry, and says so.
	says := fmt.Sprintf("log format version %d; this binary reads up to version 1", replicated.LogVersion)
	if err := localcluster.Until(30*time.Second, func() error {
		code, body, err := readyz(n3)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, says) {
			return fmt.Errorf("n3 /readyz: %d %q", code, body)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if log := n3.LogTail(1 << 20); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "replicated log halted") || !strings.Contains(log, says) {
		t.Errorf("n3's log says nothing of the halt at error:\n%s", n3.LogTail(3000))
	}
	for _, n := range newer {
		if code, body, err := readyz(n); err != nil || code != http.StatusOK {
			t.Errorf("%s /readyz: %d %q %v; want ready", n.Name, code, body, err)
		}
	}

	// The cluster goes on without it; n3 applies nothing more.
	var halted struct{ Info struct{ Hash string } }
	if err := n3.GetJSON("/api/v1/jobset", &halted); err != nil {
		t.Fatal(err)
	}
	before, _ := n3.Status()
	hash, err := putJobs(leader, `{"jobs":[{"name":"later","schedules":["@every 2s"],"shell":"true"}],"source":"after the halt"}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := localcluster.Until(20*time.Second, func() error {
		for _, n := range newer {
			var js struct{ Info struct{ Hash string } }
			if err := n.GetJSON("/api/v1/jobset", &js); err != nil || js.Info.Hash != hash {
				return fmt.Errorf("%s: job set %q, want %q (%v)", n.Name, js.Info.Hash, hash, err)
			}
		}
		runs, err := leader.Runs("later", 10)
		if err != nil || len(runs) == 0 {
			return fmt.Errorf("no run of the new job yet (%v)", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var still struct{ Info struct{ Hash string } }
	if err := n3.GetJSON("/api/v1/jobset", &still); err != nil || still.Info.Hash != halted.Info.Hash {
		t.Errorf("n3's job set moved past the halt: %q, was %q (%v)", still.Info.Hash, halted.Info.Hash, err)
	}
	if runs, _ := n3.Runs("later", 10); len(runs) != 0 {
		t.Errorf("n3 applied %d runs of a job set it never applied", len(runs))
	}
	if st, err := n3.Status(); err != nil || st.RaftState == "Leader" || st.Epoch != before.Epoch {
		t.Errorf("n3 after the halt: %+v, %v; want a follower whose state stayed at epoch %d", st, err, before.Epoch)
	}

	// Upgraded, n3 reads every entry it stopped at (none was dropped by a
	// snapshot) and agrees again.
	n3.Kill()
	n3.SetCommand(newBin)
	if err := n3.Start(); err != nil {
		t.Fatal(err)
	}
	if err := localcluster.Until(40*time.Second, func() error {
		if code, body, err := readyz(n3); err != nil || code != http.StatusOK {
			return fmt.Errorf("n3 /readyz: %d %q %v", code, body, err)
		}
		var js struct{ Info struct{ Hash string } }
		if err := n3.GetJSON("/api/v1/jobset", &js); err != nil || js.Info.Hash != hash {
			return fmt.Errorf("n3 job set %q, want %q (%v)", js.Info.Hash, hash, err)
		}
		_, err := localcluster.Agreed(c.Servers())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	lr, err := leader.Runs("later", 1000)
	if err != nil {
		t.Fatal(err)
	}
	n3runs, err := n3.Runs("later", 1000)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]jobs.State{}
	for _, r := range n3runs {
		have[r.ID] = r.State
	}
	for _, r := range lr[min(len(lr), 3):] { // the newest may not have reached n3 yet
		if _, ok := have[r.ID]; !ok {
			t.Errorf("upgraded n3 misses run %s", r.ID)
		}
	}
}

// putJobs replaces the job set through n and returns its hash.
func putJobs(n *localcluster.Node, body string) (string, error) {
	req, _ := http.NewRequest(http.MethodPut, n.URL()+"/api/v1/jobset", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("PUT /api/v1/jobset: %s: %s", resp.Status, b)
	}
	var out struct{ Hash string }
	if err := json.Unmarshal(b, &out); err != nil {
		return "", err
	}
	return out.Hash, nil
}

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// A single bolt node that does not serve its store (no store.serve): its
// jobs' stdout is still published by the worker, but a job's own
// `fencecron publish` is refused, and the refusal names the setting that
// is missing, not a cluster secret the node has.
func TestAgent_PublishToAStoreNotServedNamesTheSetting(t *testing.T) {
	t.Parallel()
	path, httpPort := agentConfig(t, t.TempDir(), "ns1", "noserve-test-cluster-secret-0123456789ab", "", `store:
  backend: bolt
jobs:
  - name: pub
    schedule: "@every 1h"
    shell: 'echo x | fencecron publish pub/own.txt || exit 9'
    output: 'pub/{{ .RunID }}.txt'
`)
	proctest.Start(t, "agent", "agent", "-config", path)
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	proctest.Eventually(t, 30*time.Second, "the agent serving", func() error {
		_, _, err := proctest.Get(base + "/healthz")
		return err
	})
	var run jobs.Run
	proctest.Eventually(t, 30*time.Second, "a trigger", func() error {
		resp, err := http.Post(base+"/api/v1/jobs/pub/trigger", "application/json", nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("trigger: %s", resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(&run)
	})
	proctest.Eventually(t, 30*time.Second, "the run to end", func() error {
		var out struct{ Runs []jobs.Run }
		if err := proctest.GetJSON(base+"/api/v1/runs?job=pub", &out); err != nil {
			return err
		}
		for _, r := range out.Runs {
			if r.ID == run.ID && r.State.Terminal() {
				run = r
				return nil
			}
		}
		return fmt.Errorf("not ended yet")
	})
	a := run.Attempts[len(run.Attempts)-1]
	if a.ExitCode == nil || *a.ExitCode != 9 || !strings.Contains(a.StderrTail, "store.serve: true") || strings.Contains(a.StderrTail, "cluster secret") {
		t.Errorf("the job's own publish: %s, stderr %q; want exit 9, refused naming store.serve: true, not a cluster secret", a.State, a.StderrTail)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// metricValue reads one sample of a node's /metrics, written as
// name{labels} exactly as the text format has it; false if absent.
func metricValue(t *testing.T, base, sample string) (float64, bool) {
	t.Helper()
	body, err := httpGet(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// A job whose own `fencecron publish` is refused because a newer
// attempt's token already holds the key: the node serving the store
// counts the stale_owner decision and tells the leader, which records the
// refusal against the job's attempt; the attempt ends fenced and the
// cluster counts a stale write refused (the FSM's part of issue 12's
// ledger of refusals).
//
// Two jobs share the scope stale/: late is triggered first (the older
// token) and waits for a file; early is triggered next (a newer token)
// and publishes stale/shared.txt; then the file lets late publish there.
func TestAgent_RefusedJobPublishReachesTheLedger(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	path, httpPort := agentConfig(t, dir, "l1", "ledger-test-cluster-secret-0123456789abc", "", fmt.Sprintf(`store:
  backend: bolt
  serve: true
jobs:
  - name: late
    schedule: "@every 1h"
    shell: 'for i in $(seq 600); do [ -e %q ] && break; sleep 0.1; done; echo late | fencecron publish stale/shared.txt'
    output: 'stale/late-{{ .RunID }}.txt'
    timeout: 2m
  - name: early
    schedule: "@every 1h"
    shell: 'echo early | fencecron publish stale/shared.txt'
    output: 'stale/early-{{ .RunID }}.txt'
`, gate))
	proctest.Start(t, "agent", "agent", "-config", path)
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	trigger := func(job string) jobs.Run {
		t.Helper()
		var run jobs.Run
		proctest.Eventually(t, 30*time.Second, "a trigger of "+job, func() error {
			resp, err := http.Post(base+"/api/v1/jobs/"+job+"/trigger", "", nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return json.NewDecoder(resp.Body).Decode(&run)
		})
		return run
	}
	waitRun := func(job, id string, what string, ok func(jobs.Run) bool) jobs.Run {
		t.Helper()
		var found jobs.Run
		proctest.Eventually(t, 60*time.Second, job+" "+what, func() error {
			var out struct{ Runs []jobs.Run }
			if err := proctest.GetJSON(base+"/api/v1/runs?job="+job, &out); err != nil {
				return err
			}
			for _, r := range out.Runs {
				if r.ID == id && ok(r) {
					found = r
					return nil
				}
			}
			return fmt.Errorf("not yet: %+v", out.Runs)
		})
		return found
	}
	started := func(r jobs.Run) bool { a, ok := r.Latest(); return ok && !a.StartedAt.IsZero() }

	late := trigger("late")
	waitRun("late", late.ID, "running", started)
	early := trigger("early")
	early = waitRun("early", early.ID, "succeeded", func(r jobs.Run) bool { return r.State == jobs.Succeeded })
	newer, _ := early.Latest()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	late = waitRun("late", late.ID, "finished", func(r jobs.Run) bool { return r.State.Terminal() })
	att, _ := late.Latest()
	if !tokenLess(att.Token, newer.Token) {
		t.Fatalf("late's token %s is not older than early's %s: the test set-up is wrong", att.Token, newer.Token)
	}
	if att.ExitCode == nil || *att.ExitCode != exitStaleOwner {
		t.Errorf("late's attempt: exit code %v, stderr %q; want %d, its publish refused as stale_owner", att.ExitCode, att.StderrTail, exitStaleOwner)
	}

	// The node serving the store counted the decision.
	if v, _ := metricValue(t, base, `fencecron_store_decisions_total{outcome="stale_owner"}`); v != 1 {
		t.Errorf("fencecron_store_decisions_total{outcome=\"stale_owner\"} = %v, want 1", v)
	}

	// It told the leader, against late's attempt.
	wantDetail := fmt.Sprintf("stale_owner stale/shared.txt greatest=%s", newer.Token)
	proctest.Eventually(t, 10*time.Second, "a store_refused note of late's attempt", func() error {
		var out struct{ Events []jobs.Event }
		if err := proctest.GetJSON(base+"/api/v1/events?limit=1000", &out); err != nil {
			return err
		}
		for _, e := range out.Events {
			if e.Kind == jobs.NoteStoreRefused && e.Attempt == att.ID && e.Detail == wantDetail {
				return nil
			}
		}
		return fmt.Errorf("none with detail %q among %d events", wantDetail, len(out.Events))
	})

	// The ledger: the attempt ended fenced, and the cluster counts it.
	staleRefused, _ := metricValue(t, base, "fencecron_cluster_stale_writes_refused_total")
	if att.State != jobs.Fenced {
		t.Errorf("late's attempt ended %s (%s), want fenced", att.State, att.Error)
	}
	if staleRefused != 1 {
		t.Errorf("fencecron_cluster_stale_writes_refused_total = %v, want 1", staleRefused)
	}
	if v, _ := metricValue(t, base, "fencecron_cluster_attempts_fenced_total"); v != 1 {
		t.Errorf("fencecron_cluster_attempts_fenced_total = %v, want 1", v)
	}
}

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// A dev node's /metrics has the per-job figures once the report job
// succeeded: its successful runs and when the last one ended, labelled
// job_name (never job); the whole exposition passes promtool.
func TestDev_JobMetrics(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	dev := startDev(t, t.TempDir(), proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t))
	run := dev.waitSucceeded(t, jobs.Fence{})
	att, _ := run.Latest()
	var body []byte
	succeeded := regexp.MustCompile(`(?m)^fencecron_job_runs_total\{job_name="report",state="succeeded"\} (\d+)$`)
	last := regexp.MustCompile(`(?m)^fencecron_job_last_success_timestamp_seconds\{job_name="report"\} (\S+)$`)
	proctest.Eventually(t, 30*time.Second, "per-job figures of report", func() error {
		var err error
		if body, err = httpGet(dev.base + "/metrics"); err != nil {
			return err
		}
		if m := succeeded.FindSubmatch(body); m == nil || string(m[1]) == "0" {
			return fmt.Errorf("no succeeded report runs counted")
		}
		if last.Find(body) == nil {
			return fmt.Errorf("no last success of report")
		}
		return nil
	})
	v, err := strconv.ParseFloat(string(last.FindSubmatch(body)[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	// The last success is at or after the run we saw end.
	if got := time.Unix(0, int64(v*1e9)); got.Before(att.EndedAt.Add(-time.Millisecond)) || got.After(time.Now().Add(time.Minute)) {
		t.Errorf("last success %s, want at or after %s", got, att.EndedAt)
	}
	if m := regexp.MustCompile(`(?m)^fencecron_job_\w+\{(.*,)?(job|instance)=`).Find(body); m != nil {
		t.Errorf("a per-job series labelled job or instance: %s", m)
	}
	if err := promtoolCheck(t, tool, body); err != nil {
		t.Errorf("promtool check metrics: %v", err)
	}
}

// The alert rules of deploy/prometheus/alerts.yaml pass `promtool check
// rules`, and name the per-job metrics by their real names.
func TestAlertRules_PassPromtool(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	rules, err := os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fencecron_job_last_success_timestamp_seconds", "fencecron_job_runs_total", "job_name", "fencecron_cluster_stale_writes_refused_total"} {
		if !bytes.Contains(rules, []byte(name)) {
			t.Errorf("the alert rules do not use %s", name)
		}
	}
	if out, err := exec.Command(tool, "check", "rules", alertRulesFile).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules %s: %v\n%s", alertRulesFile, err, out)
	}
	// The check is effective: a broken expression fails it.
	file := filepath.Join(t.TempDir(), "rules.yaml")
	bad := strings.Replace(string(rules), "max by (job_name)", "max by (job_name", 1)
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(tool, "check", "rules", file).Run(); err == nil {
		t.Error("promtool passed a broken rule: the check is not effective")
	}
}

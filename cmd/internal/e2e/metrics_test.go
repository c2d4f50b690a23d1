package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// promtool returns the path of Prometheus' promtool. Outside CI a machine
// without it skips the test; in CI (CI=true) its absence fails it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("promtool not found, and CI=true: .ci/run installs Debian's prometheus package, which provides it")
	}
	t.Skip("promtool not found: install Debian's prometheus package (apt-get install -y prometheus, as .ci/run does) to run this test")
	return ""
}

// promtoolCheck runs `promtool check metrics` on an exposition and
// returns what it said if it found a problem.
func promtoolCheck(t *testing.T, tool string, exposition []byte) error {
	t.Helper()
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// A live `fencecron dev` node's /metrics, once it has run a job, passes
// Prometheus' own linter; and the linter is really run: the same output
// with one counter not named *_total fails it.
func TestDev_MetricsPassPromtool(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	dev := startDev(t, t.TempDir(), proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t))
	dev.waitSucceeded(t, jobs.Fence{})
	body, err := httpGet(dev.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if err := promtoolCheck(t, tool, body); err != nil {
		t.Errorf("promtool check metrics on a dev node's /metrics: %v", err)
	}
	for _, want := range []string{"fencecron_raft_term ", "fencecron_raft_last_log_index ", `fencecron_job_lateness_seconds_count{job_name="report"} `,
		`fencecron_store_decisions_total{outcome="applied"} `, "go_goroutines ", "process_resident_memory_bytes "} {
		if !bytes.Contains(body, []byte("\n"+want)) {
			t.Errorf("no %s in /metrics", strings.TrimSpace(want))
		}
	}
	if m := regexp.MustCompile(`(?m)^\w+\{(.*,)?(job|instance)=`).Find(body); m != nil {
		t.Errorf("a label Prometheus keeps for the scrape target: %s", m)
	}
	bad := append(body, "# HELP fencecron_bad_counter A counter not named *_total.\n# TYPE fencecron_bad_counter counter\nfencecron_bad_counter 1\n"...)
	if err := promtoolCheck(t, tool, bad); err == nil || !strings.Contains(err.Error(), "_total") {
		t.Errorf("promtool passed a counter without _total (%v): the check is not effective", err)
	}
}

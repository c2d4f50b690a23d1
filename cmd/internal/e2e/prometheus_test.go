package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

// The deployable observability files, from this package's directory.
const (
	alertRulesFile = "../../../deploy/prometheus/alerts.yaml"
	dashboardFile  = "../../../deploy/grafana/fencecron.json"
)

// prometheusServer returns the path of Prometheus' server. Outside CI a
// machine without it skips the test; in CI (CI=true) its absence fails it.
func prometheusServer(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("prometheus")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("prometheus not found, and CI=true: .ci/run installs Debian's prometheus package, which provides it")
	}
	t.Skip("prometheus not found: install Debian's prometheus package (apt-get install -y prometheus, as .ci/run does) to run this test")
	return ""
}

// startPrometheus runs a Prometheus server on loopback that scrapes
// targets every second and evaluates rules every second, and returns
// its base URL. It is killed when the test ends.
func startPrometheus(t *testing.T, bin string, targets []string, rules string) string {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(rules)
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: fencecron
    static_configs:
      - targets: [%s]
`, abs, strings.Join(quoted, ", "))
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("--- log of prometheus ---\n%s", localcluster.LogTail(logPath, 8000))
		}
	})
	return "http://" + addr
}

// promResult is the answer of Prometheus' HTTP API.
type promResult struct {
	Status string
	Error  string
	Data   json.RawMessage
}

func promAPI(base, path string, q url.Values, v any) error {
	resp, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r promResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: %s: %v", path, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, r.Status, r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

// promQuery runs an instant query and returns its samples' values; an
// empty slice means the query returned no data.
func promQuery(base, expr string) ([]float64, error) {
	var data struct {
		ResultType string
		Result     []struct{ Value [2]any }
	}
	if err := promAPI(base, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", data.ResultType)
	}
	out := make([]float64, 0, len(data.Result))
	for _, s := range data.Result {
		text, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("sample value %v: %v", s.Value[1], err)
		}
		out = append(out, v)
	}
	return out, nil
}

// dashboardQueries reads every panel's queries from the Grafana
// dashboard, by panel title, with Grafana's $__rate_interval made
// concrete (four of the test's one-second scrapes, as Grafana would make
// it, and then some).
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string][]string{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, "fencecron_") {
				t.Errorf("panel %q: query %q reads no fencecron metric", p.Title, tg.Expr)
			}
			out[p.Title] = append(out[p.Title], strings.ReplaceAll(tg.Expr, "$__rate_interval", "30s"))
		}
	}
	return out
}

const prometheusJobs = `  - name: tick
    schedule: "@every 1s"
    shell: 'true'
    overlap: allow
    misfire: all
    catchup_window: 1m
    group: g
  - name: fail
    schedule: "@every 2s"
    shell: 'exit 1'
  - name: tok
    schedule: "@every 1s"
    shell: 'printf %s "$FENCECRON_TOKEN"'
    output: out/latest
`

// A real Prometheus scraping a real three-node cluster answers every
// query of deploy/grafana/fencecron.json with data, loads
// deploy/prometheus/alerts.yaml (which promtool accepts), and fires the
// alerts whose conditions the test causes: a failing job, and a stale
// write the store refused.
func TestPrometheus_DashboardAndAlerts(t *testing.T) {
	t.Parallel()
	tool, server := promtool(t), prometheusServer(t)
	if out, err := exec.Command(tool, "check", "rules", alertRulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", alertRulesFile, err, out)
	}
	queries := dashboardQueries(t)
	c := startCluster(t, localcluster.Options{Servers: 3, Jobs: prometheusJobs, Groups: "  - {name: g, max_running: 4, max_waiting: 20}\n"})
	agree(t, c, 30*time.Second)
	var targets []string
	for _, n := range c.Nodes {
		targets = append(targets, strings.TrimPrefix(n.URL(), "http://"))
	}
	prom := startPrometheus(t, server, targets, alertRulesFile)
	proctest.Eventually(t, 60*time.Second, "Prometheus scrapes all three nodes", func() error {
		v, err := promQuery(prom, `sum(up{job="fencecron"})`)
		if err == nil && (len(v) != 1 || v[0] != 3) {
			err = fmt.Errorf("up: %v, want 3", v)
		}
		return err
	})

	// Catch-up runs: every node stopped for 4s, so the fire times of
	// those seconds are granted late once they run again.
	for _, n := range c.Nodes {
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	for time.Since(stopped) < 4*time.Second {
		time.Sleep(100 * time.Millisecond) // the outage itself
	}
	for _, n := range c.Nodes {
		if err := n.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	agree(t, c, 30*time.Second)

	// A stale write: tok's first body is its run's signed token; once a
	// newer run has replaced it, the first one is written again.
	store := c.Nodes[0].URL() // the first server serves the store
	publishStale(t, store, "out/latest")

	// Every panel's every query returns data, and a number.
	proctest.Eventually(t, 90*time.Second, "every dashboard query returns data", func() error {
		var empty []string
		for title, exprs := range queries {
			for _, e := range exprs {
				v, err := promQuery(prom, e)
				if err != nil {
					return fmt.Errorf("panel %q: %s: %v", title, e, err)
				}
				finite := false
				for _, x := range v {
					finite = finite || !math.IsNaN(x)
				}
				if !finite {
					empty = append(empty, fmt.Sprintf("%q: %s (%v)", title, e, v))
				}
			}
		}
		sort.Strings(empty)
		if len(empty) > 0 {
			return fmt.Errorf("%d queries without a number:\n%s", len(empty), strings.Join(empty, "\n"))
		}
		return nil
	})

	// The alerts the test caused fire.
	proctest.Eventually(t, 60*time.Second, "the caused alerts fire", func() error {
		var data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
		if err := promAPI(prom, "/api/v1/alerts", nil, &data); err != nil {
			return err
		}
		firing := map[string]bool{}
		for _, a := range data.Alerts {
			if a.State == "firing" {
				firing[a.Labels["alertname"]+"/"+a.Labels["job_name"]] = true
			}
		}
		for _, want := range []string{"FencecronJobFailing/fail", "FencecronStaleWriteRefused/"} {
			if !firing[want] {
				return fmt.Errorf("%s not firing; firing: %v", want, firing)
			}
		}
		if firing["FencecronJobFailing/tick"] || firing["FencecronJobFailing/tok"] {
			return fmt.Errorf("FencecronJobFailing fires for a job that does not fail: %v", firing)
		}
		return nil
	})
}

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// A running job's output in a real Chromium, from a real `fencecron
// dev`: the attempt page shows the first line while the job still runs
// (it waits for a file the test creates), then the line it prints after;
// the finished attempt's stdout (the job publishes nothing) is on the
// job page. Markup in the output stays text.
func TestDashboard_LiveOutputChromium(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	proctest.Start(t, "dev",
		"dev", "-data", t.TempDir(),
		"-http", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"-raft-port", fmt.Sprint(raftPort), "-gossip-port", fmt.Sprint(gossipPort))
	addr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	base := "http://" + addr
	proctest.Eventually(t, 30*time.Second, "dev ready", func() error {
		_, _, err := proctest.Get(base + "/readyz")
		return err
	})

	dir := t.TempDir()
	gate := filepath.Join(dir, "go-on")
	file := filepath.Join(dir, "jobs.yaml")
	// The job waits at most a minute for the gate, so it cannot outlive
	// a failed test by much.
	yaml := fmt.Sprintf(`jobs:
  - name: talk
    schedule: "0 0 1 1 *"
    shell: 'echo "live <one> & co"; i=0; while [ ! -e %s ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo "done <two>"'
    timeout: 2m
`, gate)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(proctest.Binary(t), append([]string{args[0], "-addr", addr}, args[1:]...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("fencecron %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	cli("apply", file)
	trig := cli("trigger", "talk")
	t.Logf("trigger: %s", strings.TrimSpace(trig))
	var attempt string
	proctest.Eventually(t, 30*time.Second, "the talk attempt running", func() error {
		var out struct{ Runs []jobs.Run }
		if err := proctest.GetJSON(base+"/api/v1/runs?job=talk", &out); err != nil {
			return err
		}
		if len(out.Runs) == 0 || len(out.Runs[0].Attempts) == 0 {
			return fmt.Errorf("no attempt yet")
		}
		attempt = out.Runs[0].Attempts[0].ID
		return nil
	})

	ctx, step, poll := newBrowser(t, browser)
	step("open the attempt page",
		chromedp.Navigate(base+"/attempts/"+attempt),
		chromedp.WaitVisible(chromedp.CSS("pre#stdout")),
	)
	// The first line appears while the job runs (the page may have been
	// rendered before the process printed it: then the poll brings it).
	poll("the first line, live", `(() => {
		const o = document.getElementById("stdout");
		return o && o.textContent.includes("live <one> & co") && !o.textContent.includes("done") && o.dataset.final !== "true" ? "yes" : "";
	})()`, 30*time.Second)
	window := `window.__stay = "same page"`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](window)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	poll("the second line and the end, without a reload", `(() => {
		const o = document.getElementById("stdout"), s = document.getElementById("attempt-state");
		return window.__stay === "same page" && o && o.textContent.includes("done <two>") && s && s.textContent === "succeeded" ? "yes" : "";
	})()`, 30*time.Second)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("one, two").length`)); err != nil || n != 0 {
		t.Errorf("output became markup: %d elements, %v", n, err)
	}
	screenshot(t, ctx, "-output")

	// The finished attempt's stdout is on the job page, from its record.
	step("open the job page",
		chromedp.Navigate(base+"/jobs/talk"),
		chromedp.WaitVisible(chromedp.CSS("table.runs")),
	)
	got := poll("the stdout tail on the job page", `(() => {
		const p = document.querySelector("pre.stdout-tail");
		return p ? p.textContent : "";
	})()`, 15*time.Second)
	if got != "live <one> & co\ndone <two>\n" || strings.Contains(got, "&amp;") {
		t.Errorf("job page stdout tail = %q", got)
	}
}

// TestCluster_LiveOutputAcrossNodes: a job runs on worker w1 (its
// target tag); the server n1 answers for its output while it runs by
// asking w1 over the internal API (TLS between real processes), then
// from the run's record once it has ended.
func TestCluster_LiveOutputAcrossNodes(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "go-on")
	c := startCluster(t, localcluster.Options{Servers: 1, Workers: 1, Profile: "fast",
		Tags: map[string]map[string]string{"w1": {"zone": "w"}},
		Jobs: fmt.Sprintf(`  - name: talk
    schedule: "0 0 1 1 *"
    shell: 'echo "live one on $FENCECRON_NODE"; i=0; while [ ! -e %s ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo "done two"'
    target: {zone: w}
    timeout: 2m
`, gate)})
	agree(t, c, 60*time.Second)
	n1 := c.Node("n1")
	var run jobs.Run
	err := localcluster.Until(30*time.Second, func() error {
		// The worker must be known to gossip (with its HTTP address)
		// first: until then the trigger is skipped, no worker matching.
		run = jobs.Run{}
		if err := n1.Post("/api/v1/jobs/talk/trigger", nil, &run); err != nil {
			return err
		}
		if len(run.Attempts) == 0 {
			return fmt.Errorf("run %s %s: %s", run.ID, run.State, run.Reason)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Attempts) == 0 || run.Attempts[0].Worker != "w1" {
		t.Fatalf("triggered run %+v: want an attempt on w1", run)
	}
	id := run.Attempts[0].ID
	var out worker.LiveOutput
	err = localcluster.Until(30*time.Second, func() error {
		out = worker.LiveOutput{}
		if err := n1.GetJSON("/api/v1/attempts/"+id+"/output", &out); err != nil {
			return err
		}
		if !out.Running || out.Final || out.Node != "w1" || out.Stdout.Text != "live one on w1\n" {
			return fmt.Errorf("output %+v: want the first line, running on w1", out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Asking from where it left off gives nothing new yet.
	var more worker.LiveOutput
	if err := n1.GetJSON(fmt.Sprintf("/api/v1/attempts/%s/output?stdout_from=%d", id, out.Stdout.Next), &more); err != nil || (more.Running && more.Stdout.Text != "") {
		t.Errorf("from offset %d: %+v, %v", out.Stdout.Next, more, err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = localcluster.Until(30*time.Second, func() error {
		out = worker.LiveOutput{}
		if err := n1.GetJSON("/api/v1/attempts/"+id+"/output", &out); err != nil {
			return err
		}
		if !out.Final || out.Stdout.Text != "live one on w1\ndone two\n" {
			return fmt.Errorf("output %+v: want the record's whole stdout", out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

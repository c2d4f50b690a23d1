package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

// After a restart, the fire times missed while the node was down run as
// catch-up runs; their lateness goes to its own histogram, and the
// lateness of runs granted on time stays small.
func TestDev_CatchupLatenessApart(t *testing.T) {
	// Alone, not in parallel (see the package comment): lateness bounds.
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(file, []byte("jobs:\n  - name: tick\n    schedule: \"@every 1s\"\n    shell: 'true'\n    misfire: all\n    overlap: allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	start := func() *proctest.Proc {
		return proctest.Start(t, "dev", "dev", "-jobs", file, "-data", data, "-http", fmt.Sprintf("127.0.0.1:%d", httpPort),
			"-raft-port", strconv.Itoa(raftPort), "-gossip-port", strconv.Itoa(gossipPort))
	}
	count := func(body []byte, name string) float64 {
		m := regexp.MustCompile(`(?m)^` + name + `\{job_name="tick"\} (\S+)$`).FindSubmatch(body)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	p := start()
	proctest.Eventually(t, 30*time.Second, "tick runs", func() error {
		body, err := httpGet(base + "/metrics")
		if err != nil {
			return err
		}
		if count(body, "fencecron_job_lateness_seconds_count") < 2 {
			return fmt.Errorf("fewer than 2 on-time starts")
		}
		return nil
	})
	p.Signal(syscall.SIGINT)
	if _, ok := p.Wait(30 * time.Second); !ok {
		t.Fatal("dev did not stop")
	}
	down := time.Now()
	for time.Since(down) < 5*time.Second {
		time.Sleep(100 * time.Millisecond) // the outage itself: fire times missed while down
	}
	start()
	var body []byte
	proctest.Eventually(t, 60*time.Second, "catch-up runs and on-time runs after the restart", func() error {
		var err error
		if body, err = httpGet(base + "/metrics"); err != nil {
			return err
		}
		if c := count(body, "fencecron_job_catchup_lateness_seconds_count"); c < 3 {
			return fmt.Errorf("%v catch-up starts", c)
		}
		if c := count(body, "fencecron_job_lateness_seconds_count"); c < 2 {
			return fmt.Errorf("%v on-time starts", c)
		}
		return nil
	})
	// Catch-up runs were missed by seconds; on-time ones start within a
	// second or so even on a loaded machine.
	if c, s := count(body, "fencecron_job_catchup_lateness_seconds_count"), count(body, "fencecron_job_catchup_lateness_seconds_sum"); s/c < 2 {
		t.Errorf("catch-up lateness averages %.2fs over %v runs; want the seconds of the outage", s/c, c)
	}
	onTime := count(body, "fencecron_job_lateness_seconds_count")
	m := regexp.MustCompile(`(?m)^fencecron_job_lateness_seconds_bucket\{job_name="tick",le="5"\} (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatal("no le=5 bucket")
	}
	if under, _ := strconv.ParseFloat(string(m[1]), 64); under != onTime {
		t.Errorf("%v of %v on-time starts under 5s: a catch-up run is mixed in", under, onTime)
	}
}

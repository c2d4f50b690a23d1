package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/explain"
)

// startDevJobs runs `fencecron dev -jobs FILE` with the given jobs
// section and returns it with its address (HOST:PORT).
func startDevJobs(t *testing.T, jobsYAML string) (*devNode, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(file, []byte("jobs:\n"+jobsYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	p := proctest.Start(t, "dev", "dev", "-jobs", file, "-data", t.TempDir(), "-http", addr,
		"-raft-port", strconv.Itoa(raftPort), "-gossip-port", strconv.Itoa(gossipPort))
	d := &devNode{Proc: p, base: "http://" + addr}
	proctest.Eventually(t, 30*time.Second, "dev ready with the file's jobs", func() error {
		var list struct{ Jobs []jobs.Spec }
		if err := proctest.GetJSON(d.base+"/api/v1/jobs", &list); err != nil {
			return err
		}
		if len(list.Jobs) == 0 {
			return fmt.Errorf("no jobs yet")
		}
		return nil
	})
	return d, addr
}

// explainJobs: one job whose every other fire time finds its previous
// run open (overlap: forbid), and one at 02:30 in Berlin, whose
// 2026-03-29 falls in the spring-forward gap.
const explainJobs = `  - name: solo
    schedule: "@every 1s"
    shell: 'sleep 1.5'
    overlap: forbid
    history: {runs: 1000}
  - name: nightly
    schedule: "30 2 * * *"
    timezone: Europe/Berlin
    shell: 'true'
`

// TestExplain_ForbidAndDSTGap: explain, against a real dev node, names
// the open run that made overlap: forbid skip a fire time, and explains
// 02:30 on the day Berlin's clocks jump from 02:00 to 03:00 from the
// schedule itself.
func TestExplain_ForbidAndDSTGap(t *testing.T) {
	t.Parallel()
	d, addr := startDevJobs(t, explainJobs)

	var skipped jobs.Run
	proctest.Eventually(t, 30*time.Second, "a solo fire time skipped for overlap", func() error {
		var out struct{ Runs []jobs.Run }
		if err := proctest.GetJSON(d.base+"/api/v1/runs?job=solo&state=skipped", &out); err != nil {
			return err
		}
		for _, r := range out.Runs {
			if strings.Contains(r.Reason, "overlap: forbid") {
				skipped = r
				return nil
			}
		}
		return fmt.Errorf("%d skipped runs, none for overlap", len(out.Runs))
	})
	open := strings.Fields(strings.TrimPrefix(skipped.Reason, "previous run "))[0]

	out, err := cli(t, "explain", "-addr", addr, "solo@"+skipped.ScheduledAt.UTC().Format(time.RFC3339Nano))
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, out)
	}
	if !strings.Contains(out, "skipped: previous run "+open+" still open (overlap: forbid)") {
		t.Errorf("explain of %s does not name the open run %s:\n%s", skipped.ID, open, out)
	}
	// The open run it names (a run id is JOB@TIME too) is a real run of
	// the job, with an attempt and a token.
	proctest.Eventually(t, 30*time.Second, "the open run finished", func() error {
		var ex explain.Explanation
		if err := proctest.GetJSON(d.base+"/api/v1/jobs/solo/explain?at="+strings.TrimPrefix(open, "solo@"), &ex); err != nil {
			return err
		}
		if len(ex.Fates) != 1 || ex.Fates[0].Outcome != explain.FateRan || ex.Fates[0].Run == nil || len(ex.Fates[0].Run.Attempts) == 0 {
			return fmt.Errorf("explanation of %s: %+v", open, ex)
		}
		return nil
	})
	if out, err := cli(t, "explain", "-addr", addr, open); err != nil || !strings.Contains(out, "ran: succeeded after 1 attempt(s)") || !strings.Contains(out, "TOKEN") {
		t.Errorf("explain %s: err %v, want the run's attempt table:\n%s", open, err, out)
	}

	out, err = cli(t, "explain", "-addr", addr, "nightly@2026-03-29T02:30")
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, out)
	}
	for _, want := range []string{
		"02:30 does not exist in Europe/Berlin on 2026-03-29: the clocks jump from 02:00 to 03:00 at 2026-03-29T01:00:00Z",
		"dst.spring: shift fires it once at the end of the gap, 2026-03-29 03:00:00 CEST",
		"2026-03-29 03:00:00 CEST (2026-03-29T01:00:00Z): unrecorded",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain nightly@2026-03-29T02:30 lacks %q:\n%s", want, out)
		}
	}

	// Not a fire time at all: the nearest ones.
	out, err = cli(t, "explain", "-addr", addr, "nightly@2026-07-01T12:00:00Z")
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, out)
	}
	if want := "not a fire time of nightly; nearest: before 2026-07-01 02:30:00 CEST (2026-07-01T00:30:00Z), after 2026-07-02 02:30:00 CEST (2026-07-02T00:30:00Z)"; !strings.Contains(out, want) {
		t.Errorf("explain of a non-fire time lacks %q:\n%s", want, out)
	}
	if out, err := cli(t, "explain", "-addr", addr, "nosuchjob@2026-07-01T12:00:00Z"); err == nil || !strings.Contains(err.Error(), "unknown job") {
		t.Errorf("explain of an unknown job: err %v, out %s; want unknown job", err, out)
	}
}

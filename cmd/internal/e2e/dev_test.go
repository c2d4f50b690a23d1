package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// devNode is one `fencecron dev` process under test.
type devNode struct {
	*proctest.Proc
	base string
}

func startDev(t *testing.T, dataDir string, httpPort, raftPort, gossipPort int) *devNode {
	t.Helper()
	p := proctest.Start(t, "dev",
		"dev", "-data", dataDir,
		"-http", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"-raft-port", strconv.Itoa(raftPort), "-gossip-port", strconv.Itoa(gossipPort))
	return &devNode{Proc: p, base: fmt.Sprintf("http://127.0.0.1:%d", httpPort)}
}

func (d *devNode) runs(t *testing.T) []jobs.Run {
	t.Helper()
	var out struct{ Runs []jobs.Run }
	if err := proctest.GetJSON(d.base+"/api/v1/runs?limit=1000", &out); err != nil {
		t.Fatal(err)
	}
	return out.Runs
}

// waitSucceeded waits for a succeeded report run granted after the given
// token and returns it.
func (d *devNode) waitSucceeded(t *testing.T, after jobs.Fence) jobs.Run {
	t.Helper()
	var found jobs.Run
	proctest.Eventually(t, 30*time.Second, "a succeeded report run", func() error {
		var out struct{ Runs []jobs.Run }
		if err := proctest.GetJSON(d.base+"/api/v1/runs?job=report", &out); err != nil {
			return err
		}
		for _, r := range out.Runs {
			a, ok := r.Latest()
			if r.State == jobs.Succeeded && ok && tokenLess(after, a.Token) {
				found = r
				return nil
			}
		}
		return fmt.Errorf("%d report runs, none succeeded after token %s", len(out.Runs), after)
	})
	return found
}

func tokenLess(a, b jobs.Fence) bool {
	return fencedstore.Token(a).Less(fencedstore.Token(b))
}

// The walking skeleton end to end: a real dev node runs the report job,
// publishes its CSV with the attempt's token, stops cleanly on SIGINT, and
// after a restart on the same data directory keeps its history and only
// issues greater tokens.
func TestDev_ReportPublishedAndHistorySurvivesRestart(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)

	dev := startDev(t, dataDir, httpPort, raftPort, gossipPort)
	run := dev.waitSucceeded(t, jobs.Fence{})
	att, _ := run.Latest()
	if att.Token.Epoch == 0 || att.Token.Seq == 0 {
		t.Fatalf("attempt token = %+v, want a minted (epoch, seq)", att.Token)
	}
	if att.StoreOutcome != "applied" {
		t.Errorf("store outcome = %q, want applied", att.StoreOutcome)
	}
	wantKey := "reports/" + run.ScheduledAt.UTC().Format("2006-01-02T15-04-05") + ".csv"
	if run.Output != wantKey {
		t.Errorf("output key = %q, want %q", run.Output, wantKey)
	}

	// The published CSV is the command's stdout, and the store holds it
	// under the attempt's token.
	body, hdr, err := proctest.Get(dev.base + "/api/v1/store/" + run.Output)
	if err != nil {
		t.Fatal(err)
	}
	wantCSV := fmt.Sprintf("scheduled_at,epoch,seq,run\n%s,%d,%d,%s\n",
		run.ScheduledAt.UTC().Format(time.RFC3339), att.Token.Epoch, att.Token.Seq, run.ID)
	if string(body) != wantCSV {
		t.Errorf("published CSV =\n%s\nwant\n%s", body, wantCSV)
	}
	if got, want := hdr.Get("Fencecron-Token"), att.Token.String(); got != want {
		t.Errorf("Fencecron-Token header = %q, want %q", got, want)
	}
	var list struct{ Keys []fencedstore.Meta }
	if err := proctest.GetJSON(dev.base+"/api/v1/store?prefix=reports/", &list); err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, k := range list.Keys {
		if k.Key == run.Output {
			listed = true
			if k.Greatest != fencedstore.Token(att.Token) || k.Version != 1 {
				t.Errorf("listed %s: greatest %s version %d, want %s and 1", k.Key, k.Greatest, k.Version, att.Token)
			}
		}
	}
	if !listed {
		t.Errorf("%s not listed under reports/", run.Output)
	}

	// Ctrl-C: a clean stop within 5 seconds.
	before := dev.runs(t)
	if err := dev.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitErr, exited := dev.Wait(5 * time.Second)
	if !exited {
		t.Fatal("dev did not exit within 5s of SIGINT")
	}
	if waitErr != nil {
		t.Fatalf("dev exited with %v after SIGINT, want status 0", waitErr)
	}

	// Restart on the same data directory.
	dev = startDev(t, dataDir, httpPort, raftPort, gossipPort)
	var greatest jobs.Fence
	for _, r := range before {
		for _, a := range r.Attempts {
			if tokenLess(greatest, a.Token) {
				greatest = a.Token
			}
		}
	}
	next := dev.waitSucceeded(t, greatest)
	after := dev.runs(t)
	ids := map[string]bool{}
	for _, r := range after {
		ids[r.ID] = true
	}
	for _, r := range before {
		if !ids[r.ID] {
			t.Errorf("run %s from before the restart is gone", r.ID)
		}
	}
	// Every run granted after the restart carries a token greater than
	// every token issued before it.
	old := map[string]bool{}
	for _, r := range before {
		old[r.ID] = true
	}
	for _, r := range after {
		if old[r.ID] {
			continue
		}
		for _, a := range r.Attempts {
			if !tokenLess(greatest, a.Token) {
				t.Errorf("attempt %s after restart has token %s, not greater than %s", a.ID, a.Token, greatest)
			}
		}
	}
	if nt, _ := next.Latest(); !strings.HasPrefix(next.ID, "report@") || nt.Token.Epoch <= greatest.Epoch {
		t.Errorf("after restart: run %s token %s, want a new epoch above %d", next.ID, nt.Token, greatest.Epoch)
	}
}

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// A bad job file stops dev before anything starts, with the problem's
// line and column.
func TestDev_JobsFileChecked(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(file, []byte("jobs:\n  - name: x\n    schedule: \"not a schedule\"\n    shell: 'true'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	out, err := cli(t, "dev", "-jobs", file, "-data", data, "-http", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "-jobs: ") || !strings.Contains(err.Error(), "jobs.yaml:3:") {
		t.Fatalf("dev -jobs with a bad file: err %v, out %s; want the problem with its line", err, out)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("data folder %s created for a bad file (stat: %v)", data, err)
	}
	if _, err := cli(t, "dev", "-jobs", file, "extra"); err == nil {
		t.Error("dev with a stray argument: no error")
	}
}

// dev -jobs runs the file's jobs, not the examples; started again on the
// same data folder after the file changed, it runs the file as it is now.
func TestDev_JobsFileReplacesOnRestart(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	file := filepath.Join(dir, "jobs.yaml")
	write := func(names ...string) {
		var b strings.Builder
		b.WriteString("jobs:\n")
		for _, n := range names {
			fmt.Fprintf(&b, "  - name: %s\n    schedule: \"0 0 1 1 *\"\n    shell: 'true'\n", n)
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	start := func(want ...string) *proctest.Proc {
		p := proctest.Start(t, "dev", "dev", "-jobs", file, "-data", data, "-http", fmt.Sprintf("127.0.0.1:%d", httpPort),
			"-raft-port", strconv.Itoa(raftPort), "-gossip-port", strconv.Itoa(gossipPort))
		proctest.Eventually(t, 30*time.Second, "the file's jobs", func() error {
			var list struct{ Jobs []jobs.Spec }
			if err := proctest.GetJSON(base+"/api/v1/jobs", &list); err != nil {
				return err
			}
			var got []string
			for _, j := range list.Jobs {
				got = append(got, j.Name)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("jobs %v, want %v", got, want)
			}
			return nil
		})
		return p
	}
	write("alpha", "beta")
	p := start("alpha", "beta")
	p.Signal(syscall.SIGINT)
	if _, ok := p.Wait(30 * time.Second); !ok {
		t.Fatal("dev did not stop on SIGINT")
	}
	write("gamma")
	start("gamma")
}

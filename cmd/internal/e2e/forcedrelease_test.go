package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// A stuck attempt is released by an operator with `fencecron release`,
// sent to a follower: its lease ends through the log, the store floor of
// its job is raised to its token, the worker kills its process, the run
// is retried with a newer token, the audit trail names the reason and
// who asked, and the released attempt's own credentials (token, store
// address and CA, as its worker gave them) publish too late: the store
// refuses them as stale, also on a key of its scope that no newer token
// has touched.
func TestCluster_ForcedRelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The first attempt records its environment and pid, then hangs; the
	// retry prints and exits 0, so its output is published with its token.
	job := fmt.Sprintf(`  - name: stuck
    schedule: "@yearly"
    shell: 'if [ -e %[1]s/first ]; then echo retried; exit 0; fi; touch %[1]s/first; env | grep ^FENCECRON_ > %[1]s/env.1; echo $$ > %[1]s/pid.1; sleep 300'
    output: stuck/out.txt
    retries: 1
    lease_ttl: 6s
    timeout: 10m
`, dir)
	c := startRaceCluster(t, localcluster.Options{Servers: 3, Jobs: job})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	waitAlive(t, leader, "n1", "n2", "n3")
	var follower *localcluster.Node
	for _, n := range c.Servers() {
		if n.Name != a.Leader {
			follower = n
			break
		}
	}

	// A loaded machine may move leadership under the trigger: ask again
	// (overlap: forbid skips a second run while the first is open), then
	// take the run that was granted.
	proctest.Eventually(t, 30*time.Second, "a trigger answered", func() error {
		return follower.Post("/api/v1/jobs/stuck/trigger", nil, nil)
	})
	var run jobs.Run
	proctest.Eventually(t, 30*time.Second, "the granted run", func() error {
		runs, err := follower.Runs("stuck", 10)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if len(r.Attempts) > 0 {
				run = r
				return nil
			}
		}
		return fmt.Errorf("no granted run among %d", len(runs))
	})
	first := jobs.AttemptID(run.ID, 1)
	var pid int
	proctest.Eventually(t, 30*time.Second, "the first attempt running", func() error {
		b, err := os.ReadFile(filepath.Join(dir, "pid.1"))
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	proctest.Eventually(t, 10*time.Second, "the first attempt recorded running", func() error {
		r := runOf(t, leader, run.ID)
		if at, _ := r.Latest(); at.State != jobs.Running {
			return fmt.Errorf("attempt %s is %s", at.ID, at.State)
		}
		return nil
	})

	bin := proctest.Binary(t)
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "FENCECRON_API_TOKEN=")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	// -reason is required.
	if out, err := cli("release", "-addr", follower.URL(), first); err == nil || !strings.Contains(out, "-reason") {
		t.Fatalf("release without -reason: err %v, output %q; want a refusal naming -reason", err, out)
	}
	out, err := cli("release", "-addr", follower.URL(), "-reason", "hung on a dead NFS mount", first)
	if err != nil {
		t.Fatalf("release: %v\n%s", err, out)
	}
	t.Logf("fencecron release: %s", out)
	if !strings.Contains(out, "released "+first) || !strings.Contains(out, "store floor of job stuck raised to") {
		t.Errorf("release printed %q, want the release and the raised store floor", out)
	}

	// The worker is told at its next renewal and kills the process.
	proctest.Eventually(t, 20*time.Second, "the released process killed", func() error {
		if err := syscall.Kill(pid, 0); err == nil {
			return fmt.Errorf("process %d still alive", pid)
		}
		return nil
	})
	// The retry runs with a newer token and publishes.
	var done jobs.Run
	proctest.Eventually(t, 30*time.Second, "the retry succeeded", func() error {
		done = runOf(t, leader, run.ID)
		if done.State != jobs.Succeeded || len(done.Attempts) != 2 {
			return fmt.Errorf("run %s with %d attempts", done.State, len(done.Attempts))
		}
		return nil
	})
	old, retry := done.Attempts[0], done.Attempts[1]
	if old.State != jobs.Lost || !strings.Contains(old.Error, "released by loopback 127.0.0.1: hung on a dead NFS mount") {
		t.Errorf("released attempt: %s %q", old.State, old.Error)
	}
	if !newer(retry.Token, old.Token) || retry.StoreOutcome != "applied" {
		t.Errorf("retry token %s (store %s), released token %s: want newer, applied", retry.Token, retry.StoreOutcome, old.Token)
	}

	// The audit trail names reason and asker.
	var events wire.EventList
	if err := follower.GetJSON("/api/v1/events?limit=500", &events); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events.Events {
		if e.Kind == jobs.EventReleased && e.Attempt == first {
			found = true
			if !strings.Contains(e.Detail, "hung on a dead NFS mount") || !strings.Contains(e.Detail, "loopback 127.0.0.1") {
				t.Errorf("release event detail %q: want the reason and the asker", e.Detail)
			}
		}
	}
	if !found {
		t.Errorf("no %s event for %s", jobs.EventReleased, first)
	}

	// Released twice: nothing more to end; the floor is raised again.
	if out, err := cli("release", "-addr", leader.URL(), "-reason", "again", first); err != nil || !strings.Contains(out, first+" was released before") ||
		!strings.Contains(out, "store floor of job stuck raised to") {
		t.Errorf("second release: err %v, output %q; want: released before, floor raised", err, out)
	}
	// An attempt that ended otherwise is nothing to release.
	if out, err := cli("release", "-addr", leader.URL(), "-reason", "again", retry.ID); err == nil || !strings.Contains(out, "nothing to release") {
		t.Errorf("release of the succeeded retry: err %v, output %q; want a refusal: nothing to release", err, out)
	}

	// The released attempt's late publishes, with the credentials its
	// worker gave it, are refused as stale: on the key the retry took
	// over, and on one of its scope that no newer token has touched,
	// which only the floor shuts.
	env, err := os.ReadFile(filepath.Join(dir, "env.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"stuck/out.txt", "stuck/untouched.txt"} {
		pub := exec.Command(bin, "publish", key)
		pub.Env = append(os.Environ(), strings.Split(strings.TrimSpace(string(env)), "\n")...)
		pub.Stdin = strings.NewReader("stale data from the released attempt\n")
		var pubOut bytes.Buffer
		pub.Stdout, pub.Stderr = &pubOut, &pubOut
		err = pub.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitStaleOwner || !strings.Contains(pubOut.String(), "stale_owner") {
			t.Errorf("late publish of the released attempt to %s: %v\n%s\nwant exit %d, stale_owner", key, err, pubOut.String(), exitStaleOwner)
		}
	}
	if _, _, err := proctest.Get(leader.URL() + "/api/v1/store/stuck/untouched.txt"); err == nil {
		t.Error("the released attempt's late publish created stuck/untouched.txt")
	}
	var got []byte
	if got, _, err = proctest.Get(leader.URL() + "/api/v1/store/stuck/out.txt"); err != nil || string(got) != "retried\n" {
		t.Errorf("stored body %q (%v), want the retry's", got, err)
	}
}

// runOf reads one run from n.
func runOf(t *testing.T, n *localcluster.Node, id string) jobs.Run {
	t.Helper()
	job, _, _ := strings.Cut(id, "@")
	runs, err := n.Runs(job, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("run %s not found on %s", id, n.Name)
	return jobs.Run{}
}

func newer(a, b jobs.Fence) bool { return a.Epoch > b.Epoch || (a.Epoch == b.Epoch && a.Seq > b.Seq) }

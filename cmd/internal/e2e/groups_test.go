package e2e

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// A group with max_running 1 and five jobs due within three seconds: one
// runs, three wait, the fifth finds the queue full (max_waiting 3) and is
// skipped with that reason. The leader is SIGKILLed while the first runs
// and three wait: the new leader neither forgets nor doubles a waiter.
// Every waiter runs exactly once, in fire-time order, and never two at
// once: the jobs themselves check with an O_EXCL marker file, and their
// attempts' start and end times (the workers' own) never overlap.
func TestCluster_GroupLimitsAcrossLeaderKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := startCluster(t, localcluster.Options{Servers: 3, Workers: 1, StoreNode: true,
		Tags: map[string]map[string]string{"w1": {"pool": "db"}}})
	first := agree(t, c, 30*time.Second)
	leader := c.Node(first.Leader)
	waitAlive(t, leader, "n1", "n2", "n3", "w1")

	// The jobs run on the worker only: a SIGKILLed agent's job process
	// would outlive it (its own process group), and this test is about
	// the group's limit, not about fencing a dead node's leftovers.
	body := `if (set -C; echo "$FENCECRON_ATTEMPT" > D/lock) 2>/dev/null; then echo "$FENCECRON_JOB" >> D/starts; sleep 7; rm D/lock; ` +
		`else echo "$FENCECRON_ATTEMPT ran beside $(cat D/lock)" >> D/overlaps; fi`
	body = strings.ReplaceAll(body, "D/", dir+"/")
	at := time.Now().UTC().Truncate(time.Second).Add(12 * time.Second)
	cron := func(d time.Duration) string {
		t := at.Add(d)
		return fmt.Sprintf("%d %d %d %d %d *", t.Second(), t.Minute(), t.Hour(), t.Day(), int(t.Month()))
	}
	var file strings.Builder
	file.WriteString("groups:\n  - {name: db, max_running: 1, max_waiting: 3}\njobs:\n")
	offsets := map[string]time.Duration{"g1": 0, "g2": 0, "g3": time.Second, "g4": 2 * time.Second, "g5": 3 * time.Second}
	for _, name := range []string{"g1", "g2", "g3", "g4", "g5"} {
		fmt.Fprintf(&file, "  - name: %s\n    schedule: %q\n    shell: '%s'\n    group: db\n    target: {pool: db}\n    lease_ttl: 10s\n    misfire: all\n",
			name, cron(offsets[name]), body)
	}
	path := filepath.Join(dir, "jobs.yaml")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(proctest.Binary(t), "apply", "-addr", leader.URL(), path)
	cmd.Env = append(os.Environ(), "FENCECRON_API_TOKEN=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}

	// Wait for: one running, three waiting, g5 skipped.
	runsOf := func(n *localcluster.Node) map[string]jobs.Run {
		out := map[string]jobs.Run{}
		for _, name := range []string{"g1", "g2", "g3", "g4", "g5"} {
			runs, err := n.Runs(name, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				out[name] = r
			}
		}
		return out
	}
	proctest.Eventually(t, 40*time.Second, "one running, three waiting, one skipped", func() error {
		runs := runsOf(leader)
		var running, waiting, skipped int
		for _, r := range runs {
			switch {
			case len(r.Attempts) == 1 && !r.Attempts[0].State.Terminal():
				running++
			case jobs.IsWaiting(r):
				waiting++
			case r.State == jobs.Skipped:
				skipped++
			}
		}
		if running != 1 || waiting != 3 || skipped != 1 {
			return fmt.Errorf("%d running, %d waiting, %d skipped", running, waiting, skipped)
		}
		return nil
	})
	g5 := runsOf(leader)["g5"]
	if g5.State != jobs.Skipped || !strings.HasPrefix(g5.Reason, "waiting for group db: its queue is full") {
		t.Errorf("g5: %s %q; want skipped, the queue full", g5.State, g5.Reason)
	}

	// SIGKILL the leader while one runs and three wait.
	leader.Kill()
	second := agree(t, c, 30*time.Second)
	t.Logf("leader %s SIGKILLed; %s leads in epoch %d", first.Leader, second.Leader, second.Epoch)
	leader = c.Node(second.Leader)

	var runs map[string]jobs.Run
	proctest.Eventually(t, 120*time.Second, "every admitted run finished", func() error {
		runs = runsOf(leader)
		for _, name := range []string{"g1", "g2", "g3", "g4"} {
			if r := runs[name]; r.State != jobs.Succeeded {
				return fmt.Errorf("%s is %s (%s)", r.ID, r.State, r.Reason)
			}
		}
		return nil
	})

	// Exactly once each, never two at once.
	if b, err := os.ReadFile(filepath.Join(dir, "overlaps")); err == nil {
		t.Errorf("two attempts of the group ran at once:\n%s", b)
	}
	type span struct {
		run        jobs.Run
		start, end time.Time
	}
	var spans []span
	for _, name := range []string{"g1", "g2", "g3", "g4"} {
		r := runs[name]
		if len(r.Attempts) != 1 {
			t.Errorf("%s has %d attempts, want 1", r.ID, len(r.Attempts))
		}
		for _, a := range r.Attempts {
			spans = append(spans, span{r, a.StartedAt, a.EndedAt})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	for i := 1; i < len(spans); i++ {
		if p, s := spans[i-1], spans[i]; s.start.Before(p.end) {
			t.Errorf("%s (%s to %s) and %s (from %s) ran at the same time", p.run.ID, p.start.Format("15:04:05.000"), p.end.Format("15:04:05.000"),
				s.run.ID, s.start.Format("15:04:05.000"))
		}
	}
	starts, err := os.ReadFile(filepath.Join(dir, "starts"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(starts))
	// The first ran at once; the waiters in fire-time order (a tie by
	// run id).
	want := []string{spans[0].run.Job}
	var waiters []jobs.Run
	for _, s := range spans[1:] {
		waiters = append(waiters, s.run)
	}
	slices.SortFunc(waiters, func(a, b jobs.Run) int {
		return cmp.Or(a.ScheduledAt.Compare(b.ScheduledAt), strings.Compare(a.ID, b.ID))
	})
	for _, r := range waiters {
		want = append(want, r.Job)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the jobs started in the order %v, want %v (fire-time order)", got, want)
	}
	for i := 1; i < len(spans); i++ {
		if spans[i].run.Job != want[i] {
			t.Errorf("attempt %d by start time is %s's, want %s's", i+1, spans[i].run.Job, want[i])
		}
	}
	var list bytes.Buffer
	for _, s := range spans {
		fmt.Fprintf(&list, "\n  %s scheduled %s ran %s to %s (%s)", s.run.Job, s.run.ScheduledAt.Format("15:04:05"), s.start.Format("15:04:05.000"), s.end.Format("15:04:05.000"), s.run.Reason)
	}
	t.Logf("runs of group db:%s", list.String())
}

package e2e

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// backfillJobs: a daily job whose process publishes its run id, and a
// job that fires every second (too many fire times for a long range).
const backfillJobs = `  - name: daily
    schedule: "@daily"
    shell: 'sleep 0.3; echo "ran $FENCECRON_RUN_ID"'
    output: 'daily/{{ .Scheduled.Format "2006-01-02" }}.txt'
  - name: often
    schedule: "@every 1s"
    shell: 'true'
    paused: true
`

// A backfill of three days of a daily job creates exactly three runs with
// trigger backfill, whose processes ran (each published its run id under
// its day's key) one at a time (max_running 1); a second backfill creates
// none and says why; a dry run lists and creates nothing; bad input is
// refused with a clear error and creates nothing. The client is the real
// `fencecron backfill` against a real node; the runs are read back
// through the API.
func TestCluster_Backfill(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 1, Jobs: backfillJobs})
	a := agree(t, c, 30*time.Second)
	n := c.Node(a.Leader)
	waitJob(t, n, "daily")
	bin := proctest.Binary(t)
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"backfill", "-addr", addrOf(n)}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	from, to := today.Add(-72*time.Hour), today
	want := []time.Time{from, from.Add(24 * time.Hour), from.Add(48 * time.Hour)}
	rfc := func(t time.Time) string { return t.Format(time.RFC3339) }

	// A dry run lists the three days and creates nothing.
	out, err := cli("-dry-run", "-from", from.Format("2006-01-02"), "-to", to.Format("2006-01-02"), "daily")
	if err != nil {
		t.Fatalf("backfill -dry-run: %v\n%s", err, out)
	}
	for _, d := range want {
		if !strings.Contains(out, "would-create "+rfc(d)) {
			t.Errorf("dry run does not list %s:\n%s", rfc(d), out)
		}
	}
	if runs, err := dailyRuns(n, to); err != nil || len(runs) != 0 {
		t.Fatalf("after a dry run: runs %v, %v; want none", runs, err)
	}

	// Bad input: refused, with what was wrong.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"from after to", []string{"-from", rfc(to), "-to", rfc(from), "daily"}, "is not before to"},
		{"from equals to", []string{"-from", rfc(to), "-to", rfc(to), "daily"}, "is not before to"},
		{"unknown job", []string{"-from", rfc(from), "-to", rfc(to), "nightly"}, "unknown job"},
		{"too many fire times", []string{"-from", rfc(from), "-to", rfc(to), "often"}, "holds more than 10000 fire times"},
		{"future", []string{"-from", rfc(from), "-to", rfc(today.Add(48 * time.Hour)), "daily"}, "is in the future"},
		{"bad time", []string{"-from", "last tuesday", "-to", rfc(to), "daily"}, "want an RFC 3339 time"},
		{"max running", []string{"-max-running", "0", "-from", rfc(from), "-to", rfc(to), "daily"}, "-max-running 0: want 1 to 100"},
		{"max running", []string{"-max-running", "101", "-from", rfc(from), "-to", rfc(to), "daily"}, "-max-running 101: want 1 to 100"},
	} {
		out, err := cli(tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: backfill %v = %v\n%s\nwant an error saying %q", tc.name, tc.args, err, out, tc.want)
		}
	}
	for _, job := range []string{"daily", "often"} {
		if runs, err := n.Runs(job, 100); err != nil || len(runs) != 0 {
			t.Fatalf("after refused backfills: %s runs %v, %v; want none", job, runs, err)
		}
	}

	// The backfill, through the API.
	var res fsm.BackfillResult
	if err := n.Post("/api/v1/jobs/daily/backfill", wire.BackfillBody{From: rfc(from), To: rfc(to)}, &res); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(res.Create, want, time.Time.Equal) || len(res.Existing) != 0 || res.MaxRunning != 1 {
		t.Fatalf("backfill = %+v, want create %v, none existing, max running 1", res, want)
	}
	var runs []jobs.Run
	proctest.Eventually(t, 60*time.Second, "three backfill runs succeeded", func() error {
		var err error
		if runs, err = dailyRuns(n, to); err != nil {
			return err
		}
		ok := 0
		for _, r := range runs {
			if r.State == jobs.Succeeded {
				ok++
			}
		}
		if ok != 3 {
			return fmt.Errorf("%d of %d runs succeeded: %v", ok, len(runs), runs)
		}
		return nil
	})
	if len(runs) != 3 {
		t.Fatalf("%d runs, want exactly 3: %v", len(runs), runs)
	}
	slices.SortFunc(runs, func(a, b jobs.Run) int { return a.ScheduledAt.Compare(b.ScheduledAt) })
	for i, r := range runs {
		if !r.ScheduledAt.Equal(want[i]) || r.Trigger != fsm.TriggerBackfill {
			t.Errorf("run %d: %s at %s trigger %q, want %s trigger backfill", i, r.ID, r.ScheduledAt, r.Trigger, want[i])
		}
		body, _, err := proctest.Get(n.URL() + "/api/v1/store/" + r.Output)
		if err != nil || string(body) != "ran "+r.ID+"\n" {
			t.Errorf("run %s output %s = %q, %v; want %q", r.ID, r.Output, body, err, "ran "+r.ID+"\n")
		}
		if i > 0 {
			prev, _ := runs[i-1].Latest()
			cur, _ := r.Latest()
			if cur.StartedAt.Before(prev.EndedAt) {
				t.Errorf("max running 1: run %s started at %s, before run %s ended at %s", r.ID, cur.StartedAt, runs[i-1].ID, prev.EndedAt)
			}
			if pt, ct := prev.Token, cur.Token; pt.Epoch > ct.Epoch || (pt.Epoch == ct.Epoch && pt.Seq >= ct.Seq) {
				t.Errorf("run %s token %s not newer than %s's %s", r.ID, cur.Token, runs[i-1].ID, prev.Token)
			}
		}
	}

	// Again: nothing new, and each time named with its run.
	out, err = cli("-from", rfc(from), "-to", rfc(to), "daily")
	if err != nil {
		t.Fatalf("second backfill: %v\n%s", err, out)
	}
	if !strings.Contains(out, "0 queued, 3 already have a run") {
		t.Errorf("second backfill says:\n%s\nwant 0 queued, 3 already have a run", out)
	}
	for _, r := range runs {
		if !strings.Contains(out, "has-run      "+rfc(r.ScheduledAt)+"  run "+r.ID+" succeeded (backfill)") {
			t.Errorf("second backfill does not name run %s:\n%s", r.ID, out)
		}
	}
	if got, err := dailyRuns(n, to); err != nil || len(got) != 3 {
		t.Errorf("after the second backfill: %d runs, %v; want 3", len(got), err)
	}
}

// A backfill asked of a follower is forwarded to the leader; killing that
// leader midway loses nothing and doubles nothing: the queue is
// replicated, so the new leader grants the rest, each time exactly once,
// and no backfill run is granted while another is open (max_running 1 is
// decided in the log, whoever proposes).
func TestCluster_BackfillSurvivesLeaderLoss(t *testing.T) {
	t.Parallel()
	const job = `  - name: daily
    schedule: "@daily"
    shell: 'sleep 1; echo "ran $FENCECRON_RUN_ID"'
    output: 'daily/{{ .Scheduled.Format "2006-01-02" }}.txt'
    lease_ttl: 3s
`
	c := startCluster(t, localcluster.Options{Servers: 3, StoreNode: true, Jobs: job})
	first := agree(t, c, 30*time.Second)
	leader := c.Node(first.Leader)
	waitAlive(t, leader, "n1", "n2", "n3")
	var follower *localcluster.Node
	for _, n := range c.Servers() {
		if n.Name != first.Leader {
			follower = n
		}
	}
	waitJobSet(t, follower)
	const days = 6
	to := time.Now().UTC().Truncate(24 * time.Hour)
	from := to.Add(-days * 24 * time.Hour)
	var res fsm.BackfillResult
	if err := follower.Post("/api/v1/jobs/daily/backfill", wire.BackfillBody{From: from.Format(time.RFC3339), To: to.Format(time.RFC3339)}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Create) != days {
		t.Fatalf("backfill through %s = %+v, want %d to create", follower.Name, res, days)
	}
	proctest.Eventually(t, 60*time.Second, "two backfill runs finished", func() error {
		runs, err := dailyRuns(leader, to)
		if err != nil {
			return err
		}
		done := 0
		for _, r := range runs {
			if r.State.Terminal() {
				done++
			}
		}
		if done < 2 {
			return fmt.Errorf("%d of %d runs finished", done, len(runs))
		}
		return nil
	})
	leader.Kill()
	second := agree(t, c, 30*time.Second)
	n := c.Node(second.Leader)
	var runs []jobs.Run
	proctest.Eventually(t, 90*time.Second, "every backfill run finished under the new leader", func() error {
		var err error
		if runs, err = dailyRuns(n, to); err != nil {
			return err
		}
		done := 0
		for _, r := range runs {
			if r.State.Terminal() {
				done++
			}
		}
		if len(runs) != days || done != days {
			return fmt.Errorf("%d runs, %d finished", len(runs), done)
		}
		return nil
	})
	seen := map[time.Time]bool{}
	for _, r := range runs {
		if seen[r.ScheduledAt] || r.Trigger != fsm.TriggerBackfill || r.ScheduledAt.Before(from) || !r.ScheduledAt.Before(to) {
			t.Errorf("run %s: trigger %q at %s (seen before: %v)", r.ID, r.Trigger, r.ScheduledAt, seen[r.ScheduledAt])
		}
		seen[r.ScheduledAt] = true
	}
	// Granted one at a time: each run's first grant comes after the
	// previous run's last attempt ended (ended by the worker, or by the
	// leader that expired it).
	slices.SortFunc(runs, func(a, b jobs.Run) int { return a.Attempts[0].GrantedAt.Compare(b.Attempts[0].GrantedAt) })
	for i := 1; i < len(runs); i++ {
		prev, _ := runs[i-1].Latest()
		if g := runs[i].Attempts[0].GrantedAt; g.Before(prev.EndedAt) {
			t.Errorf("max running 1: run %s granted at %s, before run %s ended at %s", runs[i].ID, g, runs[i-1].ID, prev.EndedAt)
		}
	}
	var again fsm.BackfillResult
	if err := n.Post("/api/v1/jobs/daily/backfill", wire.BackfillBody{From: from.Format(time.RFC3339), To: to.Format(time.RFC3339), DryRun: true}, &again); err != nil {
		t.Fatal(err)
	}
	if len(again.Create) != 0 || len(again.Existing) != days || again.Pending != 0 {
		t.Errorf("dry run after: %+v, want nothing to create, %d existing, nothing pending", again, days)
	}
}

// waitJob waits until n knows job: a leader proposes the config's job
// set once its epoch is committed, which agree waits for, and not for the
// set itself.
func waitJob(t *testing.T, n *localcluster.Node, job string) {
	t.Helper()
	proctest.Eventually(t, 30*time.Second, "job "+job+" in the applied set", func() error {
		return n.GetJSON("/api/v1/jobs/"+job, &struct{}{})
	})
}

// Runs trimmed from the replicated state (here a hot window of 3 runs)
// cannot be backfilled again: the times at or before the job's horizon
// are refused and said to be, the others that ran are named, and nothing
// is created.
func TestCluster_BackfillAfterTrimCreatesNothing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 1, Jobs: backfillJobs,
		Env: map[string][]string{"n1": {"FENCECRON_FAULTS=hot-runs=3"}}})
	a := agree(t, c, 30*time.Second)
	n := c.Node(a.Leader)
	waitJob(t, n, "daily")
	const days = 6
	to := time.Now().UTC().Truncate(24 * time.Hour)
	from := to.Add(-days * 24 * time.Hour)
	body := wire.BackfillBody{From: from.Format(time.RFC3339), To: to.Format(time.RFC3339), MaxRunning: 3}
	var res fsm.BackfillResult
	if err := n.Post("/api/v1/jobs/daily/backfill", body, &res); err != nil || len(res.Create) != days {
		t.Fatalf("backfill = %+v, %v; want %d to create", res, err, days)
	}
	proctest.Eventually(t, 60*time.Second, "every backfill run finished", func() error {
		runs, err := dailyRuns(n, to)
		if err != nil {
			return err
		}
		done := 0
		for _, r := range runs {
			if r.State == jobs.Succeeded {
				done++
			}
		}
		if done != days {
			return fmt.Errorf("%d of %d runs succeeded", done, len(runs))
		}
		return nil
	})
	var again fsm.BackfillResult
	proctest.Eventually(t, 30*time.Second, "runs trimmed from the hot window", func() error {
		again = fsm.BackfillResult{}
		body.DryRun = true
		if err := n.Post("/api/v1/jobs/daily/backfill", body, &again); err != nil {
			return err
		}
		if len(again.BeforeHorizon) == 0 {
			return fmt.Errorf("nothing before the horizon yet: %+v", again)
		}
		return nil
	})
	body.DryRun = false
	if err := n.Post("/api/v1/jobs/daily/backfill", body, &again); err != nil {
		t.Fatal(err)
	}
	if len(again.Create) != 0 || len(again.BeforeHorizon)+len(again.Existing) != days || again.Horizon.IsZero() {
		t.Errorf("backfill after trim = %+v, want nothing created, every time refused or named", again)
	}
	for _, at := range again.BeforeHorizon {
		if at.After(again.Horizon) {
			t.Errorf("%s refused, but it is after the horizon %s", at, again.Horizon)
		}
	}
	if runs, err := dailyRuns(n, to); err != nil || len(runs) != days {
		t.Errorf("after: %d runs, %v; want %d", len(runs), err, days)
	}
	out, err := exec.Command(proctest.Binary(t), "backfill", "-addr", addrOf(n), "-dry-run", "-from", body.From, "-to", body.To, "daily").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused (at or before the retained horizon") {
		t.Errorf("CLI dry run: %v\n%s", err, out)
	}
}

// dailyRuns returns the daily job's runs but those its schedule fires at
// or after to (today's midnight, outside every range here), should a test
// cross midnight.
func dailyRuns(n *localcluster.Node, to time.Time) ([]jobs.Run, error) {
	runs, err := n.Runs("daily", 100)
	return slices.DeleteFunc(runs, func(r jobs.Run) bool { return r.Trigger == "schedule" && !r.ScheduledAt.Before(to) }), err
}

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// historyTuning shrinks the replicated state's hot window (a few seconds
// of runs) and Raft's snapshot rhythm, so that within the test's half minute
// almost every run leaves the replicated state for the history, and the
// log is compacted past what a wiped server would need. The threshold is
// in entries, not runs: a second's runs share one grant entry and their
// completions a few more, so the test's half minute writes only some hundreds.
const historyTuning = "hot-runs=120,hot-events=300,raft-snapshot-threshold=64,raft-trailing-logs=32,raft-snapshot-interval-ms=1000"

// historyJobs are n jobs firing every second (h000...), plus keep3 (its
// history keeps 3 runs) and young (its history keeps 20s).
func historyJobs(n int) string {
	var b strings.Builder
	job := func(name, extra string) {
		fmt.Fprintf(&b, "  - name: %s\n    schedule: \"* * * * * *\"\n    command: [\"/bin/true\"]\n    overlap: allow\n    misfire: all\n    catchup_window: 10m\n%s", name, extra)
	}
	for i := range n {
		job(fmt.Sprintf("h%03d", i), "")
	}
	job("keep3", "    history: {runs: 3}\n")
	job("young", "    history: {max_age: 20s}\n")
	return b.String()
}

// listRuns pages through GET /api/v1/runs with query q, limit runs a page.
func listRuns(n *localcluster.Node, q url.Values, limit int) ([]jobs.Run, error) {
	q = maps(q)
	q.Set("limit", fmt.Sprint(limit))
	var out []jobs.Run
	for range 10_000 {
		var page wire.RunList
		if err := n.GetJSON("/api/v1/runs?"+q.Encode(), &page); err != nil {
			return nil, err
		}
		out = append(out, page.Runs...)
		if page.Next == "" {
			return out, nil
		}
		q.Set("cursor", page.Next)
	}
	return nil, fmt.Errorf("%s: more than 10000 pages", n.Name)
}

func maps(q url.Values) url.Values {
	c := url.Values{}
	for k, v := range q {
		c[k] = slices.Clone(v)
	}
	return c
}

// hotRuns is how many runs n's replicated state holds (its metric
// fencecron_cluster_runs, summed over the states).
func hotRuns(n *localcluster.Node) (int, error) {
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		return 0, err
	}
	b, err := wire.ReadAnswer(resp)
	if err != nil {
		return 0, err
	}
	total := 0
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "fencecron_cluster_runs{"); ok {
			var v float64
			if _, err := fmt.Sscan(rest[strings.Index(rest, "}")+1:], &v); err != nil {
				return 0, fmt.Errorf("%q: %v", line, err)
			}
			total += int(v)
		}
	}
	return total, nil
}

// checkEverySecond says what is wrong with runs as the runs of job
// scheduled every second from from to to (exclusive), newest first, each
// once and finished.
func checkEverySecond(runs []jobs.Run, job string, from, to time.Time) error {
	var want []string
	for at := to.Add(-time.Second); !at.Before(from); at = at.Add(-time.Second) {
		want = append(want, jobs.RunID(job, at))
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.ID)
		if !r.State.Terminal() {
			return fmt.Errorf("%s is %s, not finished yet", r.ID, r.State)
		}
	}
	if !slices.Equal(got, want) {
		missing, twice := 0, 0
		seen := map[string]int{}
		for _, id := range got {
			seen[id]++
		}
		for _, id := range want {
			if seen[id] == 0 {
				missing++
			}
		}
		for _, n := range seen {
			if n > 1 {
				twice++
			}
		}
		return fmt.Errorf("listed %d runs (%d of the %d wanted missing, %d listed more than once): %v", len(got), missing, len(want), twice, got)
	}
	return nil
}

// replaceJobSet replaces the cluster's job set through n.
func replaceJobSet(n *localcluster.Node, specs []jobs.Spec) error {
	b, _ := json.Marshal(wire.JobSetRequest{Source: "history test", Jobs: specs})
	req, _ := http.NewRequest(http.MethodPut, n.URL()+"/api/v1/jobset", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	_, err = wire.ReadAnswer(resp)
	return err
}

// 60 jobs fire every second for half a minute on three servers whose
// replicated state holds only a few seconds of runs: every run of one job
// in that half minute is listed, once, by every server; again after all three
// are SIGKILLed and restarted on their data directories; and by a server
// whose data directory was wiped, once it has installed the leader's
// snapshot and backfilled the history it skipped. Retention by count and
// by age keeps what it should and nothing else, the same on every server.
func TestCluster_HistoryKeepsEveryRun(t *testing.T) {
	t.Parallel()
	env := map[string][]string{}
	for _, n := range []string{"n1", "n2", "n3"} {
		env[n] = []string{"FENCECRON_FAULTS=" + historyTuning}
	}
	// Sixty runs a second for half a minute: the test build, never a
	// race-built one, which cannot keep that pace on a small machine.
	c, err := localcluster.Start(localcluster.Options{Binary: proctest.Binary(t), Dir: t.TempDir(),
		Servers: 3, Profile: "default", Jobs: historyJobs(60), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, c)
	agree(t, c, 30*time.Second)
	lastRun := func(job string) (time.Time, error) {
		var j wire.Job
		if err := c.Nodes[0].GetJSON("/api/v1/jobs/"+job, &j); err != nil {
			return time.Time{}, err
		}
		if j.LastRun == nil {
			return time.Time{}, fmt.Errorf("%s has not run yet", job)
		}
		return j.LastRun.ScheduledAt, nil
	}
	if err := localcluster.Until(30*time.Second, func() error { _, err := lastRun("h000"); return err }); err != nil {
		t.Fatal(err)
	}

	// The window: from the next whole second on, until h000 has been
	// granted its last second.
	from := time.Now().UTC().Truncate(time.Second).Add(time.Second)
	to := from.Add(30 * time.Second)
	// A loaded machine runs the window late; the wait lasts as long as the
	// cluster keeps granting, and fails if it stops for 30 s.
	if err := localcluster.UntilProgressStops(30*time.Second, 10*time.Minute, time.Second, func() (time.Time, error) {
		last, err := lastRun("h000")
		if err == nil && last.Before(to) {
			err = fmt.Errorf("h000's last run is for %s, the window ends at %s", last.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		return last, err
	}); err != nil {
		t.Fatal(err)
	}
	// Pause every job: what follows reads a history that no longer grows.
	var set wire.JobSet
	if err := c.Nodes[0].GetJSON("/api/v1/jobset", &set); err != nil {
		t.Fatal(err)
	}
	for i := range set.Jobs {
		set.Jobs[i].Paused = true
	}
	if err := localcluster.Until(30*time.Second, func() error { return replaceJobSet(c.Nodes[0], set.Jobs) }); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()

	window := url.Values{"job": {"h000"}, "since": {from.Format(time.RFC3339)}, "until": {to.Format(time.RFC3339)}}
	everyServerLists := func(stage string, servers []*localcluster.Node) {
		t.Helper()
		for _, n := range servers {
			if err := localcluster.Until(60*time.Second, func() error {
				runs, err := listRuns(n, window, 7)
				if err != nil {
					return err
				}
				return checkEverySecond(runs, "h000", from, to)
			}); err != nil {
				t.Fatalf("%s: %s: %v", stage, n.Name, err)
			}
		}
	}
	everyServerLists("after the window", c.Servers())

	// The replicated state holds a few seconds only: the window came from
	// the history.
	// The jobs are paused, so archiving catches up; a busy machine may
	// have left it behind while sixty runs a second were granted.
	// It is waited for while it shrinks, not for a fixed time.
	var hot int
	if err := localcluster.UntilProgressStops(20*time.Second, 5*time.Minute, 200*time.Millisecond, func() (int, error) {
		var err error
		if hot, err = hotRuns(c.Nodes[1]); err != nil {
			return -1, err
		}
		if hot > 200 {
			return hot, fmt.Errorf("the replicated state holds %d runs; with hot-runs=120 the window cannot have come from the history", hot)
		}
		return hot, nil
	}); err != nil {
		t.Error(err)
	}
	everyServerLists("from the history", []*localcluster.Node{c.Nodes[1]})
	start := time.Now()
	all, err := listRuns(c.Nodes[1], url.Values{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	tookAll := time.Since(start)
	start = time.Now()
	runs, err := listRuns(c.Nodes[1], url.Values{"job": {"h000"}}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if st, err := os.Stat(filepath.Join(c.Nodes[1].DataDir, "history.db")); err == nil {
		t.Logf("figures on %s: %d runs in the replicated state; history.db %d KiB on disk; all %d runs listed in %s, h000's %d in %s (pages of 1000)",
			c.Nodes[1].Name, hot, st.Size()>>10, len(all), tookAll.Round(time.Millisecond), len(runs), took.Round(time.Millisecond))
	}

	// The CLI lists the same window as the API of the node it asks, read
	// once every run in the window has ended (a run still going when the
	// window closed may end as the CLI reads).
	succeeded := 0
	if err := localcluster.Until(60*time.Second, func() error {
		rs, err := listRuns(c.Nodes[2], window, 1000)
		if err != nil {
			return err
		}
		succeeded = 0
		for _, r := range rs {
			if !r.State.Terminal() {
				return fmt.Errorf("run %s is %s", r.ID, r.State)
			}
			if r.State == jobs.Succeeded {
				succeeded++
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	args := []string{"runs", "h000", "-addr", strings.TrimPrefix(c.Nodes[2].URL(), "http://"), "-since", from.Format(time.RFC3339), "-until", to.Format(time.RFC3339), "-state", "succeeded", "-limit", "1000"}
	out, err := cli(t, args...)
	if err != nil {
		t.Fatalf("fencecron %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if got := strings.Count(out, "\nh000@"); got != succeeded || got == 0 {
		t.Errorf("fencecron runs h000 -since -until -state succeeded listed %d runs, want %d:\n%s", got, succeeded, out)
	}

	// Retention by count: the newest 3 of keep3, on every server.
	keep3 := func(n *localcluster.Node) ([]string, error) {
		runs, err := listRuns(n, url.Values{"job": {"keep3"}}, 2)
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		return ids, err
	}
	var want3 []string
	if err := localcluster.Until(30*time.Second, func() error {
		var last wire.Job
		if err := c.Nodes[0].GetJSON("/api/v1/jobs/keep3", &last); err != nil {
			return err
		}
		if last.LastRun == nil {
			return fmt.Errorf("keep3 has no last run")
		}
		at := last.LastRun.ScheduledAt
		want3 = []string{jobs.RunID("keep3", at), jobs.RunID("keep3", at.Add(-time.Second)), jobs.RunID("keep3", at.Add(-2*time.Second))}
		for _, n := range c.Servers() {
			got, err := keep3(n)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want3) {
				return fmt.Errorf("%s keeps %v of keep3, want %v", n.Name, got, want3)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Retention by age: young's runs of the last 20s, then none.
	checkYoung := func(n *localcluster.Node) error {
		before := time.Now()
		runs, err := listRuns(n, url.Values{"job": {"young"}}, 100)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if r.State.Terminal() && r.ScheduledAt.Before(before.Add(-20*time.Second)) {
				return fmt.Errorf("%s lists %s, past young's max_age of 20s", n.Name, r.ID)
			}
		}
		return nil
	}
	for _, n := range c.Servers() {
		if err := checkYoung(n); err != nil {
			t.Fatal(err)
		}
	}

	// SIGKILL every server; restart them on their data directories.
	for _, n := range c.Servers() {
		n.Kill()
	}
	for _, n := range c.Servers() {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	a := agree(t, c, 30*time.Second)
	everyServerLists("after SIGKILL of every server and a restart", c.Servers())

	// Wipe a follower's data directory: it comes back empty, installs the
	// leader's snapshot (the log behind it is compacted away), and
	// backfills the history the snapshot skipped from the others.
	var victim *localcluster.Node
	for _, n := range c.Servers() {
		if n.Name != a.Leader {
			victim = n
		}
	}
	victim.Kill()
	if err := victim.Wipe(); err != nil {
		t.Fatal(err)
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	if err := localcluster.Until(60*time.Second, func() error {
		if !strings.Contains(victim.LogTail(1<<20), "history: gap filled") {
			return fmt.Errorf("%s's log does not tell of a backfilled gap", victim.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	everyServerLists("after a wiped server installed a snapshot and backfilled", []*localcluster.Node{victim})
	if got, err := keep3(victim); err != nil || !slices.Equal(got, want3) {
		t.Errorf("the wiped server keeps %v of keep3 (%v), want %v", got, err, want3)
	}

	// Past young's max_age after its last run, no server lists any, and
	// none ever lists one older than that.
	for _, n := range c.Servers() {
		var violation error
		if err := localcluster.UntilEvery(time.Minute, time.Second, func() error {
			if violation = checkYoung(n); violation != nil {
				return nil // ends the wait: reported below
			}
			runs, err := listRuns(n, url.Values{"job": {"young"}}, 100)
			if err == nil && len(runs) > 0 {
				err = fmt.Errorf("%s lists %d runs of young %s after the jobs were paused", n.Name, len(runs), time.Since(pausedAt).Round(time.Second))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if violation != nil {
			t.Fatal(violation)
		}
	}
}

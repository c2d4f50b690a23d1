package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// The fencing story as a picture, from a real cluster: w1 stops itself
// right before publishing the report, its lease expires, w2 publishes
// with a newer token, w1 wakes and its write is refused. The leader's
// timeline must show the attempts on the two worker lanes and the refused
// write as a cross on w1's lane (screenshot suffix "-handoff").
func TestDashboard_HandoffPicture(t *testing.T) {
	browser := chromium(t)
	faults := []string{"FENCECRON_FAULTS=stop-before-publish=1"}
	c, err := localcluster.Start(localcluster.Options{
		Binary: proctest.Binary(t), Dir: t.TempDir(),
		Servers: 3, Workers: 2, StoreNode: true,
		Tags: map[string]map[string]string{"w1": {"role": "worker"}, "w2": {"role": "worker"}},
		Env:  map[string][]string{"w1": faults, "w2": faults},
		Jobs: `  - name: report
    schedule: "0 0 1 1 *"
    target: {role: worker}
    shell: 'echo "report,$FENCECRON_ATTEMPT"'
    output: 'reports/{{ .Job }}.csv'
    lease_ttl: 2s
    retries: 1
    backoff: 1s
    timeout: 30s
`})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("--- log of %s (tail) ---\n%s", n.Name, n.LogTail(6000))
			}
		}
	})
	var a localcluster.Agreement
	must := func(what string, d time.Duration, cond func() error) {
		t.Helper()
		if err := localcluster.Until(d, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("a leader", 30*time.Second, func() (err error) { a, err = localcluster.Agreed(c.Live(c.Servers())); return err })
	leader := c.Node(a.Leader)
	must("both workers alive", 20*time.Second, func() error {
		st, err := leader.Status()
		if err != nil {
			return err
		}
		alive := 0
		for _, m := range st.Members {
			if (m.Name == "w1" || m.Name == "w2") && m.State == "alive" && m.Meta.HTTPAddr != "" {
				alive++
			}
		}
		if alive != 2 {
			return fmt.Errorf("%d workers alive", alive)
		}
		return nil
	})
	var run jobs.Run
	must("trigger", 15*time.Second, func() error { return leader.Post("/api/v1/jobs/report/trigger", nil, &run) })
	stalled := c.Node(run.Attempts[0].Worker)
	must("the first worker stops itself", 15*time.Second, func() error {
		if !stalled.Stopped() {
			return fmt.Errorf("%s still running", stalled.Name)
		}
		return nil
	})
	latest := func(cond func(jobs.Run) error) func() error {
		return func() error {
			runs, err := leader.Runs("report", 10)
			if err != nil {
				return err
			}
			for _, r := range runs {
				if r.ID == run.ID {
					run = r
					return cond(r)
				}
			}
			return fmt.Errorf("run %s not found", run.ID)
		}
	}
	must("the takeover publishes", 30*time.Second, latest(func(r jobs.Run) error {
		if len(r.Attempts) < 2 || r.Attempts[1].State != jobs.Succeeded {
			return fmt.Errorf("no succeeded takeover yet")
		}
		return nil
	}))
	if err := stalled.Resume(); err != nil {
		t.Fatal(err)
	}
	must("the stale attempt is fenced", 30*time.Second, latest(func(r jobs.Run) error {
		if r.Attempts[0].State != jobs.Fenced {
			return fmt.Errorf("attempt 1 is %s", r.Attempts[0].State)
		}
		return nil
	}))

	ctx, step, poll := newBrowser(t, browser)
	step("open the report's timeline on the leader",
		chromedp.Navigate(leader.URL()+"/timeline?job=report"),
		chromedp.WaitVisible(chromedp.CSS("svg#timeline g.attempt")),
	)
	// The refusal cross sits on the lane of the worker that stalled.
	js := fmt.Sprintf(`(() => {
		const lane = document.querySelector('svg#timeline g.lane[data-lane=%q] text');
		if (!lane) return "";
		const top = Number(lane.getAttribute("y")) - 25, bottom = top + 42;
		const crosses = Array.from(document.querySelectorAll("svg#timeline g.mark-refused")).filter(g => {
			const m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(g.getAttribute("transform") || "");
			return m && Number(m[2]) > top && Number(m[2]) < bottom;
		});
		const bars = document.querySelectorAll("svg#timeline g.attempt").length;
		return crosses.length === 1 && bars === 2 ? "refused on " + %q : "";
	})()`, stalled.Name, stalled.Name)
	got := poll("a refused write on the stalled worker's lane", js, 15*time.Second)
	t.Logf("%s; attempts %s (%s) and %s (%s)", got, run.Attempts[0].Token, run.Attempts[0].Worker, run.Attempts[1].Token, run.Attempts[1].Worker)
	screenshot(t, ctx, "-handoff")

	// The key's page marks the refused decision.
	step("open the key", chromedp.Navigate(leader.URL()+"/store/"+run.Output), chromedp.WaitVisible(chromedp.CSS("tr.decision.refused")))
}

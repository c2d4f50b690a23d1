package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

// The fencing story as a picture, from a real cluster: w1 stops itself
// right before publishing the report, its lease expires, w2 publishes
// with a newer token, w1 wakes and its write is refused. The leader's
// timeline must show the attempts on the two worker lanes and the refused
// write as a cross on w1's lane (screenshot suffix "-handoff").
func TestDashboard_HandoffPicture(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	c, leader := startHandoffCluster(t)
	must := func(what string, d time.Duration, cond func() error) {
		t.Helper()
		if err := localcluster.Until(d, cond); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
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

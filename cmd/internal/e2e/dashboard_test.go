package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// chromium returns the browser the dashboard test drives: $FENCECRON_TEST_CHROMIUM,
// else Debian's /usr/bin/chromium, else chromium on $PATH. Without one the
// test is skipped, except in CI, where a missing browser is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("FENCECRON_TEST_CHROMIUM"), "/usr/bin/chromium"}
	if p, err := exec.LookPath("chromium"); err == nil {
		candidates = append(candidates, p)
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c
		}
	}
	msg := "no Chromium: install Debian's chromium (apt-get install chromium) or set FENCECRON_TEST_CHROMIUM to a Chromium binary, then run go test -run TestDashboard ./cmd/internal/e2e"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// The dashboard of a real `fencecron dev`, in a real headless Chromium:
// log in with the API token, watch a scheduled run appear without a
// reload, click Trigger and see that run, open the timeline, and save a
// screenshot (in the test's temp dir, and at $FENCECRON_SCREENSHOT if set).
func TestDashboard_Chromium(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	const token = "dashboard-test-token-0123456789-abcdef"
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	proctest.Start(t, "dev",
		"dev", "-data", t.TempDir(), "-api-token", token,
		"-http", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"-raft-port", fmt.Sprint(raftPort), "-gossip-port", fmt.Sprint(gossipPort))
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	proctest.Eventually(t, 30*time.Second, "dev ready", func() error {
		_, _, err := proctest.Get(base + "/readyz")
		return err
	})

	ctx, step, poll := newBrowser(t, browser)

	// Log in: the node has an API token, so buttons need a session.
	step("log in",
		chromedp.Navigate(base+"/login?next=/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("table.members")),
	)
	poll("live updates connected", `document.getElementById("live").textContent === "live" && "yes"`, 15*time.Second)

	// A new scheduled run appears without a reload: the report job fires
	// every 5 seconds. A reload would lose the marker set on the window.
	before, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`window.__noReload = "still here"; Array.from(document.querySelectorAll("tr[data-attempt]")).map(tr => tr.dataset.attempt)`))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, id := range before {
		known[id] = true
	}
	js := fmt.Sprintf(`(() => {
		const known = new Set(%s);
		const fresh = Array.from(document.querySelectorAll("tr[data-attempt]")).map(tr => tr.dataset.attempt).filter(id => !known.has(id) && id.startsWith("report@"));
		return fresh.length > 0 && window.__noReload === "still here" ? fresh[0] : "";
	})()`, jsStrings(before))
	fresh := poll("a new report run on the overview without a reload", js, 30*time.Second)
	t.Logf("new run appeared live: %s (had %d attempts before)", fresh, len(before))

	// Trigger a job from its page and see its run.
	step("open the heartbeat job",
		chromedp.Navigate(base+"/jobs/heartbeat"),
		chromedp.WaitVisible(chromedp.CSS(`button[data-action="trigger"][data-job="heartbeat"]`)),
	)
	poll("live on the job page", `document.getElementById("live").textContent === "live" && "yes"`, 15*time.Second)
	// The job forbids overlap, and its scheduled run is granted half a
	// second ahead of its fire time: a trigger while that run is open is
	// skipped, rightly. Click when no run is open and the next fire is
	// seconds away.
	proctest.Eventually(t, 60*time.Second, "the heartbeat job idle, its next fire 3s away or more", func() error {
		var j struct {
			NextFire time.Time `json:"next_fire"`
			LastRun  *jobs.Run `json:"last_run"`
		}
		if err := proctest.GetJSON(base+"/api/v1/jobs/heartbeat", &j); err != nil {
			return err
		}
		if j.LastRun != nil && !j.LastRun.State.Terminal() {
			return fmt.Errorf("run %s is %s", j.LastRun.ID, j.LastRun.State)
		}
		if d := time.Until(j.NextFire); d < 3*time.Second {
			return fmt.Errorf("next fire in %v", d)
		}
		return nil
	})
	// Found and clicked in one evaluation: live updates re-render the
	// job's card, and a node looked up first may be gone by the click.
	// The page remembers the click, so an evaluation whose answer is lost
	// after it clicked does not click again when poll retries.
	poll("click Trigger", `(() => { if (window.__clicked) return "clicked"; const b = document.querySelector('button[data-action="trigger"][data-job="heartbeat"]'); if (!b) return ""; window.__clicked = true; b.click(); return "clicked"; })()`, 15*time.Second)
	toast := poll("the trigger's answer", `(() => { const d = document.querySelector("#toast div"); return d && d.textContent.startsWith("run ") ? d.textContent : ""; })()`, 15*time.Second)
	runID, _, _ := strings.Cut(strings.TrimPrefix(toast, "run "), ":")
	if !strings.HasPrefix(runID, "heartbeat@") {
		t.Fatalf("trigger answer %q names no heartbeat run", toast)
	}
	state := poll("the triggered run in the runs table", fmt.Sprintf(
		`(() => { const s = document.querySelector('tr[data-run=%q] .state'); return s && s.textContent === "succeeded" ? s.textContent : ""; })()`, runID), 30*time.Second)
	t.Logf("triggered %s: %s (%s)", runID, state, toast)
	var runs struct{ Runs []jobs.Run }
	if err := proctest.GetJSON(base+"/api/v1/runs?job=heartbeat", &runs); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range runs.Runs {
		if r.ID == runID {
			found = true
			if r.Trigger != "manual" {
				t.Errorf("run %s trigger = %q, want manual", r.ID, r.Trigger)
			}
		}
	}
	if !found {
		t.Errorf("the API does not know run %s", runID)
	}

	// The timeline: epochs as bands, attempts as bars with their tokens.
	// Let a few report runs pile up first, so the picture has a rhythm.
	proctest.Eventually(t, 30*time.Second, "three report runs", func() error {
		var out struct{ Runs []jobs.Run }
		if err := proctest.GetJSON(base+"/api/v1/runs?job=report", &out); err != nil {
			return err
		}
		if len(out.Runs) < 3 {
			return fmt.Errorf("%d report runs", len(out.Runs))
		}
		return nil
	})
	step("open the timeline",
		chromedp.Navigate(base+"/timeline?job=report&runs=6"),
		chromedp.WaitVisible(chromedp.CSS("svg#timeline g.attempt")),
	)
	counts, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]int](`({
		bands: document.querySelectorAll("svg#timeline rect.band").length,
		bars: document.querySelectorAll("svg#timeline g.attempt").length,
		published: document.querySelectorAll("svg#timeline g.mark-applied").length,
		lanes: document.querySelectorAll("svg#timeline g.lane").length})`))
	if err != nil {
		t.Fatal(err)
	}
	if counts["bands"] < 1 || counts["bars"] < 1 || counts["published"] < 1 || counts["lanes"] != 2 {
		t.Errorf("timeline has %v; want epoch bands, attempt bars, published marks, a worker lane and the store lane", counts)
	}
	screenshot(t, ctx, "")
}

// newBrowser starts a headless Chromium for the test and returns its tab,
// a step runner and a bounded poll of a JavaScript expression.
func newBrowser(t *testing.T, browser string) (context.Context, func(string, ...chromedp.Action[chromedp.Void]), func(string, string, time.Duration) string) {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(t.TempDir()),
	)...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelTab)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// poll waits, bounded, for a JavaScript expression to become truthy
	// and returns its value as a string. It evaluates the expression
	// afresh each time rather than using chromedp.Poll: Poll pins the
	// page's execution context when it starts, so a navigation that
	// chromedp has not yet caught up with (a form's submit, under load)
	// fails it with "Cannot find context with specified id", while a
	// fresh evaluation simply runs in whichever page is there.
	poll := func(what, expr string, within time.Duration) string {
		t.Helper()
		wrapped := `(() => { const v = (` + expr + `); return v ? String(v) : ""; })()`
		var got string
		proctest.Eventually(t, within, what, func() error {
			v, err := chromedp.Run(ctx, chromedp.Evaluate[string](wrapped))
			if err != nil {
				return err // the page is between documents
			}
			if v == "" {
				return errors.New("not yet true: " + expr)
			}
			got = v
			return nil
		})
		return got
	}
	return ctx, step, poll
}

// screenshot saves the whole page as PNG in the test's temp dir, and at
// $FENCECRON_SCREENSHOT (with suffix before its extension) if set.
func screenshot(t *testing.T, ctx context.Context, suffix string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard"+suffix+".png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))
	if extra := os.Getenv("FENCECRON_SCREENSHOT"); extra != "" {
		ext := filepath.Ext(extra)
		extra = strings.TrimSuffix(extra, ext) + suffix + ext
		if err := os.WriteFile(extra, shot, 0o644); err != nil {
			t.Errorf("FENCECRON_SCREENSHOT: %v", err)
		}
		t.Logf("screenshot also at %s", extra)
	}
}

// jsStrings renders a JavaScript array literal of strings.
func jsStrings(ss []string) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

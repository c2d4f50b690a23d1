package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// The Jobs page of a set larger than a page, in a real headless Chromium:
// a page of 100 with a link to the next, a search by name from the form,
// a search by the state of the last run, and the way back to the first
// page.
func TestDashboard_JobsSearchAndPaging(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	const n = 250
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	proctest.Start(t, "dev",
		"dev", "-data", t.TempDir(),
		"-http", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"-raft-port", fmt.Sprint(raftPort), "-gossip-port", fmt.Sprint(gossipPort))
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	proctest.Eventually(t, 30*time.Second, "dev ready", func() error {
		_, _, err := proctest.Get(base + "/readyz")
		return err
	})
	dir := filepath.Join(t.TempDir(), "jobs.d")
	writeJobFiles(t, dir, n, 2)
	if out, err := cli(t, "apply", "-addr", strings.TrimPrefix(base, "http://"), dir); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	proctest.Eventually(t, 10*time.Second, "the set applied", func() error {
		var st wire.Status
		if err := proctest.GetJSON(base+"/api/v1/status", &st); err != nil {
			return err
		}
		if st.Jobs.Count != n {
			return fmt.Errorf("%d jobs", st.Jobs.Count)
		}
		return nil
	})

	_, step, poll := newBrowser(t, browser)
	// Read once the page has loaded whole: while Chromium still parses
	// it, the table holds part of its rows.
	rows := `Array.from(document.querySelectorAll("table.jobs tr.job")).map(tr => tr.dataset.job)`
	firstAndCount := `(() => { if (document.readyState !== "complete") return ""; const r = ` + rows + `; return r.length + " " + (r[0] || ""); })()`

	step("open the Jobs page",
		chromedp.Navigate(base+"/jobs"),
		chromedp.WaitVisible(chromedp.CSS("form.jobsearch")),
	)
	if got := poll("the first page", firstAndCount, 10*time.Second); got != "100 job-000000" {
		t.Errorf("first page: %q, want 100 jobs from job-000000", got)
	}
	// Each click loads a page: the poll after it waits for the new page's
	// content. Not chromedp.WaitVisible: a query begun while the click's
	// navigation is under way can wait on the old document until the
	// test's deadline (CI saw one hang for the rest of its three minutes).
	step("next page", chromedp.Click(chromedp.CSS("nav.pager a.next")))
	if got := poll("the second page", `(() => { const s = `+firstAndCount+`; return s.endsWith("job-000100") ? s : ""; })()`, 10*time.Second); got != "100 job-000100" {
		t.Errorf("second page: %q, want 100 jobs from job-000100", got)
	}
	step("back to the first page", chromedp.Click(chromedp.CSS("nav.pager a.first")))
	poll("the first page again", `(() => { const s = `+firstAndCount+`; return s.endsWith("job-000000") ? s : ""; })()`, 10*time.Second)

	step("search by name",
		chromedp.SendKeys(chromedp.CSS(`form.jobsearch input[name="q"]`), "job-000249"),
		chromedp.Click(chromedp.CSS(`form.jobsearch button[type="submit"]`)),
	)
	if got := poll("the one job found", `(() => { const s = `+firstAndCount+`; return s.startsWith("1 ") ? s : ""; })()`, 10*time.Second); got != "1 job-000249" {
		t.Errorf("search for job-000249: %q", got)
	}
	if got := poll("the count of matches", `document.querySelector("p.jobcount").textContent`, 5*time.Second); !strings.Contains(got, "1 of 250 jobs match") {
		t.Errorf("count line %q", got)
	}

	// No job of this set has run: every one matches "never", none
	// "succeeded".
	step("search by the last run's state",
		chromedp.Navigate(base+"/jobs"),
		chromedp.WaitVisible(chromedp.CSS("form.jobsearch")),
		chromedp.SetValue(chromedp.CSS(`form.jobsearch select[name="state"]`), "succeeded"),
		chromedp.Click(chromedp.CSS(`form.jobsearch button[type="submit"]`)),
	)
	if got := poll("no job whose last run succeeded", `location.search.includes("state=succeeded") && document.readyState === "complete" ? document.querySelector("table.jobs tbody").textContent.trim() : ""`, 10*time.Second); got != "no job matches" {
		t.Errorf("state=succeeded shows %q", got)
	}
}

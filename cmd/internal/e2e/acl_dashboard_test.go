package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

// readOnlyDashboard logs a headless Chromium in at node (a follower) with
// a token whose policy reads team-a only, and checks what a person on
// that team would: the jobs page lists team-a's jobs and no other
// namespace's, the header names the token and its namespace, no page
// shows a button, and once the token is revoked the next page sends the
// browser to log in again.
func readOnlyDashboard(t *testing.T, node, root string) {
	t.Helper()
	browser := chromium(t)
	applyPolicy(t, node, root, "team-a-ro", "rules:\n  - namespace: team-a\n    capabilities: [read]\n")
	out, err := cli(t, "acl", "token", "create", "-addr", node, "-token", root, "-name", "screen-a", "-policy", "team-a-ro")
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	ro, roAccessor := secretOf(t, out)

	ctx, step, poll := newBrowser(t, browser)
	step("log in with the read-only token",
		chromedp.Navigate(node+"/jobs"),
		chromedp.WaitVisible(chromedp.CSS("#token")), // sent to the login form
		chromedp.SendKeys(chromedp.CSS("#token"), ro),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#identity")),
	)
	who := poll("the header names the token", `document.getElementById("identity").textContent`, 10*time.Second)
	if !strings.Contains(who, roAccessor) || !strings.Contains(who, "screen-a") || !strings.Contains(who, "namespaces team-a") {
		t.Errorf("header says %q, want the token %s (screen-a) and namespace team-a", who, roAccessor)
	}
	jobs, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("tr.job")).map(tr => tr.dataset.job)`))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, j := range jobs {
		seen[j] = true
		if strings.Contains(j, "team-b") {
			t.Errorf("the read-only team-a dashboard lists %s", j)
		}
	}
	if !seen["team-a:build"] || !seen["team-a:slow"] {
		t.Errorf("the read-only team-a dashboard lists %v, want team-a:build and team-a:slow", jobs)
	}
	for _, page := range []string{"/jobs", "/jobs/team-a:slow", "/"} {
		step("open "+page, chromedp.Navigate(node+page), chromedp.WaitVisible(chromedp.CSS("#identity")))
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("main button[data-action], main form[method=post]").length`))
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		if n != 0 {
			t.Errorf("%s shows the read-only token %d buttons or forms", page, n)
		}
	}
	if out, err := cli(t, "acl", "token", "revoke", "-addr", node, "-token", root, roAccessor); err != nil {
		t.Fatalf("revoke: %v\n%s", err, out)
	}
	// The revoke returns once the leader committed it; this node (a
	// follower) applies it a moment later, and a page it served before
	// that still shows the session: load the page again until it is the
	// login form, bounded.
	proctest.Eventually(t, 10*time.Second, "the revoked token's session ends", func() error {
		if err := chromedp.Do(ctx, chromedp.Navigate(node+"/jobs")); err != nil {
			return err
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#token").length`))
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the page still shows the session")
		}
		return nil
	})
	screenshot(t, ctx, "-acl")
}

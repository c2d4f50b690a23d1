package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// TestTemplates_BoundTripsAtRunTime: templates that validate renders
// within their bounds (at its sample time, 23:59:58) but that go over them
// at the times they fire: the leader skips a run whose key is over its
// bound, naming it, and an HTTP job's attempt whose body is over its bound
// fails, naming it; neither holds a server, and the node goes on firing.
func TestTemplates_BoundTripsAtRunTime(t *testing.T) {
	t.Parallel()
	notAtTheSample := `{{ if ne (.Scheduled.Format "15:04:05") "23:59:58" }}`
	key := notAtTheSample + `{{ printf "%099d%099d%099d%099d%099d%099d%099d%099d%099d%099d%099d" 1 2 3 4 5 6 7 8 9 10 11 }}{{ end }}x`
	// 64 bytes doubled nine times is 32 KiB; printed 40 times, 1.25 MiB.
	body := notAtTheSample + `{{ with print "` + strings.Repeat("x", 64) + `" }}` + strings.Repeat(`{{ with print . . }}`, 9) +
		strings.Repeat(`{{ print . }}`, 40) + strings.Repeat(`{{ end }}`, 10) + `{{ end }}`
	c := startCluster(t, localcluster.Options{Servers: 1, Jobs: fmt.Sprintf(`  - name: key
    schedule: "@every 1s"
    shell: "true"
    output: '%s'
  - name: hook
    schedule: "@every 1s"
    http: {url: "http://127.0.0.1:9/never", method: POST, body: '%s'}
`, key, body)})
	n := c.Nodes[0]
	proctest.Eventually(t, 60*time.Second, "a run of key skipped and an attempt of hook failed, each for its template's bound", func() error {
		var skipped, failed bool
		runs, err := n.Runs("key", 20)
		if err != nil {
			return err
		}
		for _, r := range runs {
			skipped = skipped || r.State == jobs.Skipped && strings.Contains(r.Reason, "template over its bound: it renders more than 1024 bytes")
		}
		runs, err = n.Runs("hook", 20)
		if err != nil {
			return err
		}
		for _, r := range runs {
			for _, a := range r.Attempts {
				failed = failed || a.State == jobs.Failed && strings.Contains(a.Error, "the template's functions make more than 1048576 bytes")
			}
		}
		if !skipped || !failed {
			return fmt.Errorf("key skipped for its bound: %v; hook failed for its bound: %v", skipped, failed)
		}
		return nil
	})
}

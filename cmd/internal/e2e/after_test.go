package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// A three-job chain (extract → transform → load) on a real node: for a
// scheduled time, each runs after its parent succeeded, with that
// scheduled time and a newer token, and publishes under it; once extract
// fails, transform and load are skipped for that time, each naming the
// parent that did not succeed.
func TestAfter_ChainRunsInOrderAndSkipsAfterAFailure(t *testing.T) {
	t.Parallel()
	flag := filepath.Join(t.TempDir(), "fail")
	c := startCluster(t, localcluster.Options{Servers: 1, Profile: "fast", Jobs: fmt.Sprintf(`  - name: extract
    schedule: "@every 2s"
    shell: 'if [ -e %q ]; then echo broken >&2; exit 4; fi; echo "extract $FENCECRON_SCHEDULED_AT"'
    output: 'etl/{{ .Scheduled.Format "150405" }}/extract'
  - name: transform
    after: [extract]
    shell: 'echo "transform $FENCECRON_SCHEDULED_AT"'
    output: 'etl/{{ .Scheduled.Format "150405" }}/transform'
  - name: load
    after: [transform]
    shell: 'echo "load $FENCECRON_SCHEDULED_AT"'
    output: 'etl/{{ .Scheduled.Format "150405" }}/load'
`, flag)})
	n := c.Nodes[0]
	runOf := func(job string, at time.Time) (jobs.Run, bool) {
		runs, err := n.Runs(job, 200)
		if err != nil {
			return jobs.Run{}, false
		}
		for _, r := range runs {
			if r.ScheduledAt.Equal(at) {
				return r, true
			}
		}
		return jobs.Run{}, false
	}

	// A scheduled time whose whole chain succeeded.
	var chain [3]jobs.Run
	proctest.Eventually(t, 60*time.Second, "a whole chain succeeds", func() error {
		loads, err := n.Runs("load", 50)
		if err != nil {
			return err
		}
		for _, l := range loads {
			if l.State != jobs.Succeeded {
				continue
			}
			e, ok1 := runOf("extract", l.ScheduledAt)
			tr, ok2 := runOf("transform", l.ScheduledAt)
			if ok1 && ok2 {
				chain = [3]jobs.Run{e, tr, l}
				return nil
			}
		}
		return fmt.Errorf("no succeeded load run yet (%d runs)", len(loads))
	})
	for i, r := range chain {
		if r.State != jobs.Succeeded || len(r.Attempts) != 1 {
			t.Fatalf("%s: %s with %d attempts", r.ID, r.State, len(r.Attempts))
		}
		if i == 0 {
			continue
		}
		parent, a, p := chain[i-1], r.Attempts[0], chain[i-1].Attempts[0]
		if !newerFence(a.Token, p.Token) {
			t.Errorf("%s's token %s is not newer than its parent %s's %s", r.ID, a.Token, parent.ID, p.Token)
		}
		if a.StartedAt.Before(p.EndedAt) {
			t.Errorf("%s started at %s, before its parent ended at %s", r.ID, a.StartedAt, p.EndedAt)
		}
		if r.Trigger != "after" || strings.Join(r.After, ",") != parent.ID {
			t.Errorf("%s: trigger %q after %v; want after %s", r.ID, r.Trigger, r.After, parent.ID)
		}
	}
	// Each published under the chain's scheduled time.
	stamp := chain[0].ScheduledAt.Format("150405")
	for _, job := range []string{"extract", "transform", "load"} {
		body, _, err := proctest.Get(n.URL() + "/api/v1/store/etl/" + stamp + "/" + job)
		if err != nil {
			t.Fatal(err)
		}
		if want := job + " " + chain[0].ScheduledAt.UTC().Format(time.RFC3339); !strings.Contains(string(body), want) {
			t.Errorf("etl/%s/%s = %q, want %q", stamp, job, body, want)
		}
	}

	// The timeline of load draws the chain: the runs it followed, up to
	// extract, linked to it.
	svg, _, err := proctest.Get(n.URL() + "/timeline.svg?job=load")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range chain {
		if !strings.Contains(string(svg), `data-attempt="`+r.Attempts[0].ID+`"`) {
			t.Errorf("load's timeline does not draw %s", r.Attempts[0].ID)
		}
	}
	for _, want := range []string{chain[2].ID + " followed " + chain[1].ID, chain[1].ID + " followed " + chain[0].ID} {
		if !strings.Contains(string(svg), `class="link"`) || !strings.Contains(string(svg), want) {
			t.Errorf("load's timeline has no link saying %q", want)
		}
	}

	// extract fails from now on: the chain is skipped after it.
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var failed jobs.Run
	proctest.Eventually(t, 60*time.Second, "transform and load skipped after extract failed", func() error {
		runs, err := n.Runs("extract", 50)
		if err != nil {
			return err
		}
		for _, e := range runs {
			if e.State != jobs.Failed {
				continue
			}
			tr, ok1 := runOf("transform", e.ScheduledAt)
			l, ok2 := runOf("load", e.ScheduledAt)
			if !ok1 || !ok2 {
				return fmt.Errorf("extract %s failed; transform %v, load %v", e.ID, ok1, ok2)
			}
			failed = e
			if tr.State != jobs.Skipped || !strings.Contains(tr.Reason, "parent extract") || len(tr.Attempts) != 0 {
				t.Errorf("transform after a failed extract: %s, %q, %d attempts", tr.State, tr.Reason, len(tr.Attempts))
			}
			if l.State != jobs.Skipped || !strings.Contains(l.Reason, "parent transform") {
				t.Errorf("load after a skipped transform: %s, %q", l.State, l.Reason)
			}
			return nil
		}
		return fmt.Errorf("no failed extract run yet")
	})
	if _, _, err := proctest.Get(n.URL() + "/api/v1/store/etl/" + failed.ScheduledAt.Format("150405") + "/transform"); err == nil {
		t.Error("a skipped transform published its output")
	}
}

// newerFence reports whether a is newer than b (compared as fence tokens).
func newerFence(a, b jobs.Fence) bool {
	return a.Epoch > b.Epoch || (a.Epoch == b.Epoch && a.Seq > b.Seq)
}

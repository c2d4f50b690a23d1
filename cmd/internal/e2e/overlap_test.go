package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/jobs"
)

// soloJob fires every second and runs for 1.5 s: under overlap: forbid,
// every other fire time at least finds its previous run open. Its history
// keeps every run the test makes (the API lists only the newest
// history.runs finished runs of a job).
const soloJob = `  - name: solo
    schedule: "@every 1s"
    shell: 'sleep 1.5'
    overlap: forbid
    lease_ttl: 10s
    timeout: 30s
    history: {runs: 10000}
`

// The race of issue 12: a forbid job fires on schedule while several
// clients per server trigger it at once, for a bounded time. The FSM
// decides overlap when it applies each grant, so however the proposals
// interleave: no two runs of the job ever ran at the same time (their
// attempts' start and end times, taken on the workers, never overlap),
// and every fire time that did not run (scheduled or manual) is recorded,
// with its reason. Before, the leader read the open runs and then
// proposed, from many goroutines at once, and two runs ran together.
func TestCluster_ForbidHoldsUnderConcurrentTriggers(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, Jobs: soloJob})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	waitAlive(t, leader, "n1", "n2", "n3")

	const (
		perServer = 3
		within    = 12 * time.Second
	)
	type answer struct {
		run jobs.Run
		via string
	}
	var (
		mu       sync.Mutex
		answers  []answer
		failures []string
		wg       sync.WaitGroup
	)
	start := time.Now()
	for _, n := range c.Servers() {
		for range perServer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < within {
					var run jobs.Run
					err := n.Post("/api/v1/jobs/solo/trigger", nil, &run)
					mu.Lock()
					if err != nil {
						failures = append(failures, err.Error())
					} else {
						answers = append(answers, answer{run, n.Name})
					}
					mu.Unlock()
					time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	if len(answers) < 20 || len(failures) > len(answers)/10 {
		t.Fatalf("%d triggers answered, %d failed (%v): too few to prove anything", len(answers), len(failures), failures[:min(len(failures), 5)])
	}

	// Let every run end, then read the replicated record.
	var runs []jobs.Run
	if err := localcluster.Until(40*time.Second, func() error {
		var err error
		if runs, err = leader.Runs("solo", 10000); err != nil {
			return err
		}
		for _, r := range runs {
			if !r.State.Terminal() && r.ScheduledAt.Before(start.Add(within)) {
				return fmt.Errorf("run %s still %s", r.ID, r.State)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// 1. Never two runs at once.
	type span struct {
		attempt    string
		start, end time.Time
	}
	var spans []span
	for _, r := range runs {
		for _, at := range r.Attempts {
			if !at.StartedAt.IsZero() {
				if at.EndedAt.IsZero() {
					at.EndedAt = time.Now() // still running (a later fire time)
				}
				spans = append(spans, span{at.ID, at.StartedAt, at.EndedAt})
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	for i := 1; i < len(spans); i++ {
		if p, s := spans[i-1], spans[i]; s.start.Before(p.end) {
			t.Errorf("%s (%s to %s) and %s (%s to %s) ran at the same time", p.attempt, p.start.Format("15:04:05.000"), p.end.Format("15:04:05.000"),
				s.attempt, s.start.Format("15:04:05.000"), s.end.Format("15:04:05.000"))
		}
	}

	// 2. Every refused fire time is recorded, with its reason.
	byID := map[string]jobs.Run{}
	skippedForOverlap := map[string]int{}
	for _, r := range runs {
		byID[r.ID] = r
		if r.State == jobs.Skipped {
			if r.Reason == "" {
				t.Errorf("run %s skipped without a reason", r.ID)
			}
			if strings.Contains(r.Reason, "overlap: forbid") {
				skippedForOverlap[r.Trigger]++
			}
		}
	}
	for _, ans := range answers {
		got, ok := byID[ans.run.ID]
		switch {
		case !ok:
			t.Errorf("trigger via %s answered %s (%s), which the cluster does not record", ans.via, ans.run.ID, ans.run.State)
		case ans.run.State == jobs.Skipped && (got.State != jobs.Skipped || got.Reason != ans.run.Reason):
			t.Errorf("trigger via %s answered %s skipped (%q); recorded %s (%q)", ans.via, ans.run.ID, ans.run.Reason, got.State, got.Reason)
		}
	}
	var skips struct{ Skips []jobs.SkipRange }
	if err := leader.GetJSON("/api/v1/skips?job=solo", &skips); err != nil {
		t.Fatal(err)
	}
	var spec jobs.Spec
	if err := leader.GetJSON("/api/v1/jobs/solo", &spec); err != nil {
		t.Fatal(err)
	}
	sched, err := spec.Schedule()
	if err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	for _, r := range runs {
		if r.Trigger == "schedule" && r.ScheduledAt.Before(start.Add(within)) {
			if first.IsZero() || r.ScheduledAt.Before(first) {
				first = r.ScheduledAt
			}
			if r.ScheduledAt.After(last) {
				last = r.ScheduledAt
			}
		}
	}
	fireTimes := 0
	for at := first; !at.IsZero() && !at.After(last); at = sched.Next(at) {
		fireTimes++
		if _, ok := byID[jobs.RunID("solo", at)]; ok {
			continue
		}
		if !slices.ContainsFunc(skips.Skips, func(s jobs.SkipRange) bool { return !at.Before(s.From) && !at.After(s.To) && s.Reason != "" }) {
			t.Errorf("fire time %s is neither a run nor in a skip range", at.Format(time.RFC3339))
		}
	}
	if fireTimes < 8 || skippedForOverlap["schedule"] == 0 || skippedForOverlap["manual"] == 0 {
		t.Errorf("%d fire times, skipped for overlap: %v; want both scheduled and manual refusals", fireTimes, skippedForOverlap)
	}
	t.Logf("%d triggers answered (%d failed), %d runs recorded, %d ran, %d fire times; skipped for overlap: %v",
		len(answers), len(failures), len(runs), len(spans), fireTimes, skippedForOverlap)

	// trigger -force runs beside the open run, and says so in the trail.
	var forced jobs.Run
	if err := localcluster.Until(10*time.Second, func() error {
		return c.Node(followerOf(c, a.Leader)).Post("/api/v1/jobs/solo/trigger?force=true", nil, &forced)
	}); err != nil {
		t.Fatal(err)
	}
	if forced.State == jobs.Skipped || !forced.Forced {
		t.Errorf("forced trigger: %s (%q), forced %v; want granted", forced.State, forced.Reason, forced.Forced)
	}
	// The answer comes once the leader committed the grant; a server reads
	// its own applied state, which may trail the commit (the first leader
	// may have lost leadership under this load), so wait for it to apply.
	if err := localcluster.Until(10*time.Second, func() error {
		var evs struct{ Events []jobs.Event }
		if err := leader.GetJSON("/api/v1/events?limit=2000", &evs); err != nil {
			return err
		}
		if !slices.ContainsFunc(evs.Events, func(e jobs.Event) bool { return e.Kind == jobs.EventForced && e.Run == forced.ID }) {
			return fmt.Errorf("no %q event for %s on %s", jobs.EventForced, forced.ID, leader.Name)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// followerOf returns the name of a server that is not leader.
func followerOf(c *localcluster.Cluster, leader string) string {
	for _, n := range c.Servers() {
		if n.Name != leader {
			return n.Name
		}
	}
	return leader
}

// A job set sent through the API is checked on the leader as the config
// file is: an output key that leaves the store, or an output larger than
// the store takes, is a 400 whichever node it is sent to, and changes
// nothing.
func TestCluster_LeaderRevalidatesJobSets(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, Jobs: tickJobs})
	a := agree(t, c, 30*time.Second)
	var before struct {
		Info struct{ Hash, Source string }
	}
	waitJobSet(t, c.Node(a.Leader))
	if err := c.Node(a.Leader).GetJSON("/api/v1/jobset", &before); err != nil || before.Info.Hash == "" {
		t.Fatalf("job set: %+v, %v", before, err)
	}
	put := func(n *localcluster.Node, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, n.URL()+"/api/v1/jobset", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(bytes.TrimSpace(b))
	}
	job := func(field string) string {
		return `{"jobs":[{"name":"evil","schedules":["@every 10s"],"shell":"true",` + field + `}],"source":"test"}`
	}
	for _, tc := range []struct{ name, body, says string }{
		{"output leaves the store", job(`"output":"../../etc/x"`), "not a valid store key"},
		{"output absolute", job(`"output":"/etc/passwd"`), "not a valid store key"},
		{"output larger than the store's cap", job(`"output":"x.txt","max_output_bytes":1073741824`), "store.max_body_bytes"},
	} {
		for _, n := range []*localcluster.Node{c.Node(a.Leader), c.Node(followerOf(c, a.Leader))} {
			code, body := put(n, tc.body)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.says) {
				t.Errorf("%s via %s: %d %s; want 400 saying %q", tc.name, n.Name, code, body, tc.says)
			}
		}
	}
	for _, n := range c.Servers() {
		var after struct {
			Info struct{ Hash, Source string }
			Jobs []jobs.Spec
		}
		// A follower may not have applied the leader's first set yet.
		waitJobSet(t, n)
		if err := n.GetJSON("/api/v1/jobset", &after); err != nil {
			t.Fatal(err)
		}
		if after.Info != before.Info || slices.ContainsFunc(after.Jobs, func(s jobs.Spec) bool { return s.Name == "evil" }) {
			t.Errorf("%s: job set %+v after refused puts, want %+v", n.Name, after.Info, before.Info)
		}
	}
	// A good one still goes through a follower.
	good, _ := json.Marshal(map[string]any{"source": "test", "jobs": []map[string]any{{"name": "fine", "schedules": []string{"@every 10s"}, "shell": "true", "output": "ok/x.txt"}}})
	if code, body := put(c.Node(followerOf(c, a.Leader)), string(good)); code != http.StatusOK {
		t.Errorf("a valid job set via a follower: %d %s", code, body)
	}
}

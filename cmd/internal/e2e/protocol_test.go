package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// workerTags put jobs that target role=worker on w1 and w2 only.
var workerTags = map[string]map[string]string{"w1": {"role": "worker"}, "w2": {"role": "worker"}}

// waitAlive waits until n's gossip shows the named nodes alive and
// dispatchable: a trigger before that finds no worker for the target.
func waitAlive(t *testing.T, n *localcluster.Node, names ...string) {
	t.Helper()
	if err := localcluster.Until(20*time.Second, func() error {
		st, err := n.Status()
		if err != nil {
			return err
		}
		for _, name := range names {
			ok := false
			for _, m := range st.Members {
				if m.Name == name && m.State == "alive" && m.Meta.HTTPAddr != "" {
					ok = true
				}
			}
			if !ok {
				return fmt.Errorf("%s does not see %s alive", n.Name, name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func trigger(t *testing.T, n *localcluster.Node, job string) jobs.Run {
	t.Helper()
	var run jobs.Run
	if err := localcluster.Until(15*time.Second, func() error {
		return n.Post("/api/v1/jobs/"+job+"/trigger", nil, &run)
	}); err != nil {
		t.Fatalf("trigger %s: %v", job, err)
	}
	if len(run.Attempts) == 0 {
		t.Fatalf("trigger %s: run %s is %s (%q) with no attempt granted", job, run.ID, run.State, run.Reason)
	}
	return run
}

// waitRun polls a run until cond accepts it.
// waitStopped waits for n to be stopped (SIGSTOP), as a fault the test
// planted stops it.
func waitStopped(t *testing.T, n *localcluster.Node) {
	t.Helper()
	if err := localcluster.Until(15*time.Second, func() error {
		if !n.Stopped() {
			return fmt.Errorf("%s is not stopped yet", n.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func waitRun(t *testing.T, n *localcluster.Node, id string, d time.Duration, cond func(jobs.Run) error) jobs.Run {
	t.Helper()
	job, _, _ := strings.Cut(id, "@")
	var run jobs.Run
	if err := localcluster.Until(d, func() error {
		runs, err := n.Runs(job, 1000)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if r.ID == id {
				run = r
				return cond(r)
			}
		}
		return fmt.Errorf("run %s not found", id)
	}); err != nil {
		t.Fatalf("run %s: %v (last seen %+v)", id, err, run)
	}
	return run
}

func history(t *testing.T, n *localcluster.Node, key string) []fencedstore.Decision {
	t.Helper()
	var out struct{ Decisions []fencedstore.Decision }
	if err := n.GetJSON("/api/v1/history/"+key, &out); err != nil {
		t.Fatal(err)
	}
	return out.Decisions
}

func fence(f jobs.Fence) fencedstore.Token { return fencedstore.Token(f) }

// 1. The report handoff. W1 holds the report attempt and stops (SIGSTOP,
// by its own hand, right before publishing: after reading, before
// writing); its lease expires; W2 gets a new attempt with a greater token
// and publishes; W1 is continued and its publish is refused as
// stale_owner. The key keeps W2's body, its history shows applied(W2)
// then stale_owner(W1), and W1's attempt ends fenced with an event that
// says why. 4. An old completion and an old renewal of W1's attempt,
// delivered afterwards, leave W2's attempt untouched.
func TestProtocol_ReportHandoff(t *testing.T) {
	t.Parallel()
	c, leader := startHandoffCluster(t)
	run := trigger(t, leader, "report")
	first := run.Attempts[0]
	w1 := c.Node(first.Worker)
	waitStopped(t, w1)
	t.Logf("%s stopped itself before publishing attempt 1 (token %s)", w1.Name, first.Token)

	// The lease expires; the takeover attempt runs elsewhere and publishes.
	run = waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
		if len(r.Attempts) < 2 || r.Attempts[1].State != jobs.Succeeded {
			return fmt.Errorf("no succeeded takeover attempt yet")
		}
		return nil
	})
	second := run.Attempts[1]
	if second.Worker == w1.Name || !fence(first.Token).Less(fence(second.Token)) {
		t.Fatalf("takeover attempt %+v: want another worker and a greater token than %s", second, first.Token)
	}
	if !run.Attempts[0].Expired || run.Attempts[0].State != jobs.Lost {
		t.Errorf("attempt 1 after expiry: %+v", run.Attempts[0])
	}
	key := run.Output
	body, err := getBody(c.Node("store"), key)
	if err != nil {
		t.Fatal(err)
	}
	wantBody := fmt.Sprintf("report,%s,%s\n", second.Worker, second.ID)
	if body != wantBody {
		t.Fatalf("body after takeover = %q, want %q", body, wantBody)
	}

	// W1 wakes up and publishes its stale report.
	if err := w1.Resume(); err != nil {
		t.Fatal(err)
	}
	run = waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
		if r.Attempts[0].State != jobs.Fenced {
			return fmt.Errorf("attempt 1 is %s", r.Attempts[0].State)
		}
		return nil
	})
	if got := run.Attempts[0]; got.StoreOutcome != "stale_owner" || !strings.Contains(got.Error, "stale_owner") || !strings.Contains(got.Error, second.Token.String()) {
		t.Errorf("attempt 1 = %+v: want fenced with a stale_owner error naming token %s", got, second.Token)
	}
	if run.State != jobs.Succeeded || run.Attempts[1].State != jobs.Succeeded {
		t.Errorf("run %s after the stale publish: %s / attempt 2 %s", run.ID, run.State, run.Attempts[1].State)
	}
	if body, _ := getBody(c.Node("store"), key); body != wantBody {
		t.Errorf("body after the stale publish = %q, want W2's %q", body, wantBody)
	}
	h := history(t, c.Node("store"), key)
	var applied, stale int = -1, -1
	for i, d := range h {
		switch {
		case d.Outcome == fencedstore.Applied && d.Token == fence(second.Token):
			applied = i
		case d.Outcome == fencedstore.StaleOwner && d.Token == fence(first.Token):
			stale = i
			if d.Greatest != fence(second.Token) {
				t.Errorf("stale_owner decision %+v: greatest %s, want %s", d, d.Greatest, second.Token)
			}
		case d.Outcome == fencedstore.Applied && d.Token == fence(first.Token):
			t.Errorf("W1's stale write was applied: %+v", d)
		}
	}
	if applied < 0 || stale < 0 || stale < applied {
		t.Errorf("history of %s = %+v: want applied(%s) then stale_owner(%s)", key, h, second.Token, first.Token)
	}
	var evs struct{ Events []jobs.Event }
	if err := leader.GetJSON("/api/v1/events?limit=5000", &evs); err != nil {
		t.Fatal(err)
	}
	fencedEvent := false
	for _, e := range evs.Events {
		if e.Kind == jobs.EventFenced && e.Attempt == first.ID && strings.Contains(e.Detail, "stale_owner") {
			fencedEvent = true
		}
	}
	if !fencedEvent {
		t.Errorf("no fenced event for %s saying why", first.ID)
	}

	// 4. Late messages for the old attempt leave the new one untouched.
	// They go to whoever leads now (a loaded machine may have had an
	// election since the trigger).
	leader = c.Node(agree(t, c, 30*time.Second).Leader)
	old := map[string]any{"attempt": first.ID, "state": "succeeded", "store_outcome": "applied", "ended_at": time.Now().UTC()}
	if err := leader.Post("/internal/v1/complete", old, nil); err != nil {
		t.Fatal(err)
	}
	var renew struct {
		Held   bool
		Reason string
	}
	if err := leader.Post("/internal/v1/renew", map[string]string{"attempt": first.ID, "node": w1.Name}, &renew); err != nil {
		t.Fatal(err)
	}
	if renew.Held {
		t.Errorf("an old renewal of %s was granted", first.ID)
	}
	after := waitRun(t, leader, run.ID, time.Second, func(jobs.Run) error { return nil })
	if after.Attempts[0].State != jobs.Fenced || len(after.Attempts) != 2 || !reflect.DeepEqual(after.Attempts[1], run.Attempts[1]) || after.State != jobs.Succeeded {
		t.Errorf("after late messages: %+v, want attempt 1 still fenced and attempt 2 untouched (%+v)", after, run.Attempts[1])
	}
}

// startHandoffCluster starts the report handoff's cluster: three
// servers, a store node, and two workers that each stop themselves right
// before publishing attempt number 1. It returns the cluster and its
// leader once both workers are visible to the leader.
func startHandoffCluster(t *testing.T) (*localcluster.Cluster, *localcluster.Node) {
	t.Helper()
	faults := []string{"FENCECRON_FAULTS=stop-before-publish=1"}
	c := startRaceCluster(t, localcluster.Options{
		Servers: 3, Workers: 2, StoreNode: true, Tags: workerTags,
		Env: map[string][]string{"w1": faults, "w2": faults},
		Jobs: `  - name: report
    schedule: "0 0 1 1 *"
    target: {role: worker}
    shell: 'echo "report,$FENCECRON_NODE,$FENCECRON_ATTEMPT"'
    output: 'reports/{{ .Job }}.csv'
    lease_ttl: 2s
    retries: 1
    backoff: 1s
    timeout: 30s
`})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	waitAlive(t, leader, "w1", "w2")
	return c, leader
}

func getBody(n *localcluster.Node, key string) (string, error) {
	resp, err := httpGet(n.URL() + "/api/v1/store/" + key)
	return string(resp), err
}

// 2. SIGKILL the leader while a run is in flight: the run completes once,
// with one attempt; every scheduled time is granted at most once; none in
// the window is lost.
func TestProtocol_LeaderKilledMidRun(t *testing.T) {
	t.Parallel()
	c := startRaceCluster(t, localcluster.Options{
		Servers: 3, Workers: 1, StoreNode: true,
		Tags: map[string]map[string]string{"w1": {"role": "worker"}},
		Jobs: tickJobs + `  - name: slow
    schedule: "0 0 1 1 *"
    target: {role: worker}
    shell: 'sleep 3; echo "slow done by $FENCECRON_ATTEMPT"'
    output: 'slow/{{ .Job }}.txt'
    lease_ttl: 10s
    retries: 2
    timeout: 60s
`})
	// The lease outlasts the failover with room: race-built nodes on a
	// busy machine took two elections and over 5 s to renew it again.
	first := agree(t, c, 30*time.Second)
	leader := c.Node(first.Leader)
	waitAlive(t, leader, "w1")
	windowStart := time.Now().UTC()
	run := trigger(t, leader, "slow")
	waitRun(t, leader, run.ID, 10*time.Second, func(r jobs.Run) error {
		if r.State != jobs.Running {
			return fmt.Errorf("state %s", r.State)
		}
		return nil
	})
	leader.Kill()
	second := agree(t, c, 20*time.Second)
	newLeader := c.Node(second.Leader)
	run = waitRun(t, newLeader, run.ID, 30*time.Second, func(r jobs.Run) error {
		if !r.State.Terminal() {
			return fmt.Errorf("state %s", r.State)
		}
		return nil
	})
	if run.State != jobs.Succeeded || len(run.Attempts) != 1 {
		t.Errorf("run in flight during failover: %s with %d attempts (%+v), want succeeded once", run.State, len(run.Attempts), run.Attempts)
	}
	windowEnd := time.Now().UTC().Add(-2 * time.Second)
	checkTicksAccounted(t, newLeader, windowStart, windowEnd)
}

// checkTicksAccounted checks every scheduled second of the tick job in
// [from, to]: granted at most once (one run per time) and ended in a
// terminal state, or skipped by policy with a reason.
func checkTicksAccounted(t *testing.T, n *localcluster.Node, from, to time.Time) {
	t.Helper()
	var runs []jobs.Run
	if err := localcluster.Until(15*time.Second, func() error {
		var err error
		runs, err = n.Runs("tick", 10000)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if !r.ScheduledAt.Before(from) && !r.ScheduledAt.After(to) && !r.State.Terminal() {
				return fmt.Errorf("run %s still %s", r.ID, r.State)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var skips struct{ Skips []jobs.SkipRange }
	if err := n.GetJSON("/api/v1/skips?job=tick", &skips); err != nil {
		t.Fatal(err)
	}
	seen := map[time.Time]int{}
	for _, r := range runs {
		seen[r.ScheduledAt.UTC()]++
		if r.State == jobs.Skipped && r.Reason == "" {
			t.Errorf("run %s skipped without a reason", r.ID)
		}
	}
	for s := from.Truncate(time.Second).Add(time.Second); !s.After(to); s = s.Add(time.Second) {
		switch seen[s] {
		case 1:
		case 0:
			covered := false
			for _, k := range skips.Skips {
				if !s.Before(k.From) && !s.After(k.To) && k.Reason != "" {
					covered = true
				}
			}
			if !covered {
				t.Errorf("tick at %s: no run and no recorded skip", s.Format(time.RFC3339))
			}
		default:
			t.Errorf("tick at %s granted %d times", s.Format(time.RFC3339), seen[s])
		}
	}
}

// 3. The dispatch reply is dropped and the dispatch retried: still one
// attempt, and the command ran once.
func TestProtocol_DroppedDispatchReplyStillOneAttempt(t *testing.T) {
	t.Parallel()
	marks := t.TempDir()
	drop := []string{"FENCECRON_FAULTS=drop-dispatch-replies=1"}
	c := startRaceCluster(t, localcluster.Options{
		Servers: 3, Workers: 1, StoreNode: true,
		Tags: map[string]map[string]string{"w1": {"role": "worker"}},
		Env:  map[string][]string{"n1": drop, "n2": drop, "n3": drop},
		Jobs: fmt.Sprintf(`  - name: once
    schedule: "0 0 1 1 *"
    target: {role: worker}
    shell: 'echo "$FENCECRON_ATTEMPT" >> %s/ran; echo ok'
    output: 'once/{{ .Job }}.txt'
    lease_ttl: 5s
    timeout: 30s
`, marks)})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	waitAlive(t, leader, "w1")
	run := trigger(t, leader, "once")
	run = waitRun(t, leader, run.ID, 20*time.Second, func(r jobs.Run) error {
		if r.State != jobs.Succeeded {
			return fmt.Errorf("state %s", r.State)
		}
		return nil
	})
	if err := oneAttemptStarted(run); err != nil {
		t.Errorf("after a dropped dispatch reply: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(marks, "ran"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "\n"); got != 1 {
		t.Errorf("the command ran %d times:\n%s", got, b)
	}
	// The work ran once; the retry of the same attempt by the leader that
	// granted it follows its backoff (unless that attempt was lost before
	// it started: then its retry may have been dropped with it). Read
	// every server's log: on a busy machine leadership may have moved
	// between the trigger and the grant.
	attempt, lost := run.Attempts[0].ID, len(run.Attempts) > 1
	if err := localcluster.Until(10*time.Second, func() error {
		for _, n := range c.Servers() {
			var dropped, retried bool
			for _, line := range strings.Split(n.LogTail(1<<20), "\n") {
				if strings.Contains(line, "attempt="+attempt+" ") {
					dropped = dropped || strings.Contains(line, "dispatch reply dropped")
					retried = retried || strings.Contains(line, "dispatched after retries")
				}
			}
			if dropped && (retried || lost) {
				return nil
			}
		}
		return fmt.Errorf("no server's log shows the dropped reply and the retry of attempt %s", attempt)
	}); err != nil {
		t.Error(err)
	}
	run = waitRun(t, leader, run.ID, time.Second, func(jobs.Run) error { return nil })
	if err := oneAttemptStarted(run); err != nil {
		t.Errorf("after the retried dispatch: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(marks, "ran")); strings.Count(string(b), "\n") != 1 {
		t.Errorf("after the retried dispatch the command ran %d times", strings.Count(string(b), "\n"))
	}
}

// oneAttemptStarted checks that the retried dispatch of a run's attempt
// made no other attempt: the run has one, or the ones before its last
// were lost before they started (on a loaded machine the worker may
// accept later than the 1 s lease before the start allows, and a newer
// token runs the job: the run still happens once).
func oneAttemptStarted(run jobs.Run) error {
	for i, a := range run.Attempts {
		if i < len(run.Attempts)-1 && (a.State != jobs.Lost || !a.StartedAt.IsZero()) {
			return fmt.Errorf("%d attempts, and attempt %d of them is not one lost before it started: %+v", len(run.Attempts), i+1, run.Attempts)
		}
	}
	if len(run.Attempts) == 0 {
		return fmt.Errorf("no attempt")
	}
	return nil
}

// 5. Renewal replies are lost while the job keeps running: the worker goes
// SUSPECT, then LOST, kills the process group, and the run is granted
// again.
func TestProtocol_LostRenewalsKillTheJobAndRegrant(t *testing.T) {
	t.Parallel()
	pids := t.TempDir()
	c := startRaceCluster(t, localcluster.Options{
		Servers: 3, Workers: 2, StoreNode: true, Tags: workerTags,
		Env: map[string][]string{"w1": {"FENCECRON_FAULTS=drop-renew-replies=1000"}, "w2": {"FENCECRON_FAULTS=drop-renew-replies=1000"}},
		Jobs: fmt.Sprintf(`  - name: long
    schedule: "0 0 1 1 *"
    target: {role: worker}
    shell: 'sh -c "echo \$\$ > %s/\$FENCECRON_ATTEMPT.pid; exec sleep 120"'
    lease_ttl: 3s
    retries: 1
    backoff: 1s
    timeout: 5m
`, pids)})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	waitAlive(t, leader, "w1", "w2")
	run := trigger(t, leader, "long")
	first := run.Attempts[0]
	run = waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
		if len(r.Attempts) < 2 {
			return fmt.Errorf("attempt 1 is %s", r.Attempts[0].State)
		}
		return nil
	})
	if got := run.Attempts[0]; got.State != jobs.Lost || !strings.Contains(got.Error, "lease") {
		t.Errorf("attempt 1 = %+v, want lost because of the lease", got)
	}
	if !fence(first.Token).Less(fence(run.Attempts[1].Token)) {
		t.Errorf("attempt 2 token %s is not greater than %s", run.Attempts[1].Token, first.Token)
	}
	var evs struct{ Events []jobs.Event }
	if err := leader.GetJSON("/api/v1/events?limit=5000", &evs); err != nil {
		t.Fatal(err)
	}
	var suspect, lost bool
	for _, e := range evs.Events {
		if e.Attempt == first.ID {
			suspect = suspect || e.Kind == jobs.EventSuspect
			lost = lost || (e.Kind == jobs.EventLost && suspect)
		}
	}
	if !suspect || !lost {
		t.Errorf("events of %s: suspect %v, then lost %v; want both", first.ID, suspect, lost)
	}
	// The job's process was killed with its group.
	b, err := os.ReadFile(filepath.Join(pids, first.ID+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := localcluster.Until(10*time.Second, func() error {
		if processAlive(pid) {
			return fmt.Errorf("job process %d of the lost attempt is alive", pid)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// 6. The whole cluster restarted on its data directories issues only
// tokens greater than every token issued before.
func TestProtocol_WholeClusterRestartTokensGrow(t *testing.T) {
	t.Parallel()
	c := startRaceCluster(t, localcluster.Options{Servers: 3, StoreNode: true, Jobs: tickJobs})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	if err := localcluster.Until(20*time.Second, func() error {
		if n := len(allAttempts(t, leader)); n < 3 {
			return fmt.Errorf("%d attempts", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Everything issued before the restart, read before the kill (the
	// tick job keeps granting, so read on the leader and kill at once).
	var greatest jobs.Fence
	before := map[string]bool{}
	for _, at := range allAttempts(t, leader) {
		before[at.ID] = true
		if fence(greatest).Less(fence(at.Token)) {
			greatest = at.Token
		}
	}
	for _, n := range c.Nodes {
		n.Kill()
	}
	// Grants committed between the read and the kill are in the log too.
	for _, n := range c.Nodes {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	// Every server replays the log on start: until the new leader's own
	// election entry is applied, they agree on the epoch from before the
	// restart (and if the same node leads again, that looks settled).
	var b localcluster.Agreement
	if err := localcluster.Until(30*time.Second, func() error {
		var err error
		if b, err = localcluster.Agreed(c.Live(c.Servers())); err == nil && b.Epoch <= a.Epoch {
			err = fmt.Errorf("agreed on epoch %d, not yet one after %d", b.Epoch, a.Epoch)
		}
		return err
	}); err != nil {
		t.Fatalf("no new epoch after the restart: %v", err)
	}
	newLeader := c.Node(b.Leader)
	var restartedAt uint64
	var evs struct{ Events []jobs.Event }
	if err := newLeader.GetJSON("/api/v1/events?limit=5000", &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		if e.Kind == jobs.EventElected && e.Epoch == b.Epoch {
			restartedAt = e.Index
		}
	}
	if restartedAt == 0 {
		t.Fatalf("no election entry of epoch %d", b.Epoch)
	}
	if err := localcluster.Until(20*time.Second, func() error {
		for _, at := range allAttempts(t, newLeader) {
			if at.Token.Seq > restartedAt {
				return nil
			}
		}
		return fmt.Errorf("no grant since the restart")
	}); err != nil {
		t.Fatal(err)
	}
	for _, at := range allAttempts(t, newLeader) {
		switch {
		case before[at.ID]:
		case at.Token.Seq < restartedAt:
			// Committed between the read and the kill: still before.
			if fence(greatest).Less(fence(at.Token)) {
				greatest = at.Token
			}
		}
	}
	for _, at := range allAttempts(t, newLeader) {
		if at.Token.Seq > restartedAt && !fence(greatest).Less(fence(at.Token)) {
			t.Errorf("attempt %s after the restart has token %s, not above %s", at.ID, at.Token, greatest)
		}
	}
}

func processAlive(pid int) bool {
	st, ok := localcluster.ProcState(pid)
	return ok && st != 'Z'
}

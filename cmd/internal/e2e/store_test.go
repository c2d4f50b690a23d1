package e2e

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/agent"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// devStore is a running `fencecron dev` node whose store a test writes to
// as a job would: with `fencecron publish` and a token signed with the
// node's own secret.
type devStore struct {
	*devNode
	addr string
	sg   *fencedstore.Signer
}

// startDevStore starts a dev node, waits for its first report, and reads
// the secret it generated (checking its mode).
func startDevStore(t *testing.T) *devStore {
	t.Helper()
	dataDir := t.TempDir()
	httpPort := proctest.FreePort(t)
	dev := startDev(t, dataDir, httpPort, proctest.FreePort(t), proctest.FreePort(t))
	dev.waitSucceeded(t, jobs.Fence{})

	path := filepath.Join(dataDir, secretFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	secret, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	sg, err := fencedstore.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	return &devStore{devNode: dev, addr: "127.0.0.1:" + strconv.Itoa(httpPort), sg: sg}
}

// fencecron runs the binary with FENCECRON_STORE set to the node and
// FENCECRON_TOKEN to token, and returns its output and exit status.
func (d *devStore) fencecron(t *testing.T, token string, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(proctest.Binary(t), args...)
	cmd.Env = append(os.Environ(), "FENCECRON_STORE="+d.addr, "FENCECRON_TOKEN="+token)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("fencecron %v did not finish in 30s", args)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// The real binary: a dev node generates its secret (0600) and serves the
// store's write endpoint, and `fencecron publish`/`get` work against it
// with only a signed token, as a job would.
func TestDev_PublishWithSignedToken(t *testing.T) {
	t.Parallel()
	d := startDevStore(t)
	sg := d.sg
	fencecron := func(token string, stdin string, args ...string) (string, int) {
		t.Helper()
		return d.fencecron(t, token, stdin, args...)
	}
	tok := mustSign(t, sg, 1<<40, 1, "manual/")
	if out, code := fencecron(tok, "hello\n", "publish", "manual/hello.txt"); code != 0 || !strings.Contains(out, "applied manual/hello.txt version=1") {
		t.Fatalf("publish: exit %d: %s", code, out)
	}
	if out, code := fencecron("", "", "get", "manual/hello.txt"); code != 0 || out != "hello\n" {
		t.Fatalf("get: exit %d: %q", code, out)
	}
	if out, code := fencecron(mustSign(t, sg, 1, 1, "manual/"), "old\n", "publish", "manual/hello.txt"); code != exitStaleOwner {
		t.Fatalf("stale publish: exit %d, want %d: %s", code, exitStaleOwner, out)
	}
	forged := strings.Replace(tok, fmt.Sprintf("v2.%d.", uint64(1<<40)), "v2.9999999999999.", 1)
	if out, code := fencecron(forged, "x", "publish", "manual/hello.txt"); code != exitError || !strings.Contains(out, "signature does not match") {
		t.Fatalf("forged publish: exit %d, want 1 with a clear message: %s", code, out)
	}
	if out, code := fencecron(tok, "x", "publish", "reports/evil.csv"); code != exitError || !strings.Contains(out, "outside the scope") {
		t.Fatalf("out-of-scope publish: exit %d: %s", code, out)
	}
}

// The attacks of issue 11 against a real node, with tokens made the way
// the worker makes FENCECRON_TOKEN (agent.TokenText) from the node's own secret:
// a superseded attempt whose token has expired cannot publish even to a
// key no newer attempt touched (exit 6, recorded as expired in that key's
// history), and a job whose output template has no literal directory gets
// a token scoped to its own directory, not the whole store, so it cannot
// overwrite another job's report.
func TestDev_ExpiredAndWholeStoreTokensRefused(t *testing.T) {
	t.Parallel()
	d := startDevStore(t)
	report := d.waitSucceeded(t, jobs.Fence{})
	hook := agent.TokenText(d.sg, slog.New(slog.DiscardHandler))
	assignment := func(job, output string, granted time.Time, seq uint64) worker.Assignment {
		run := jobs.Run{ID: jobs.RunID(job, granted), Job: job}
		return worker.Assignment{
			Run:     run,
			Attempt: jobs.Attempt{ID: jobs.AttemptID(run.ID, 1), Number: 1, Token: jobs.Fence{Epoch: 1 << 40, Seq: seq}, GrantedAt: granted},
			Spec:    jobs.Spec{Name: job, Output: output, Timeout: jobs.Duration(time.Minute), LeaseTTL: jobs.Duration(10 * time.Second)},
		}
	}
	history := func(key string) []fencedstore.Decision {
		t.Helper()
		var out struct{ Decisions []fencedstore.Decision }
		if err := proctest.GetJSON("http://"+d.addr+"/api/v1/history/"+key, &out); err != nil {
			t.Fatalf("history %s: %v", key, err)
		}
		return out.Decisions
	}

	// An attempt granted an hour ago with a 1m timeout and a 10s lease:
	// its token expired 56m50s ago.
	old := assignment("manual", "manual/{{ .RunID }}.csv", time.Now().Add(-time.Hour), 1)
	out, code := d.fencecron(t, hook(old), "late\n", "publish", "manual/never-written.csv")
	if code != exitExpired || !strings.Contains(out, "expired manual/never-written.csv version=0") || !strings.Contains(out, "token has expired") {
		t.Fatalf("publish with an expired token: exit %d, want %d: %s", code, exitExpired, out)
	}
	h := history("manual/never-written.csv")
	if len(h) != 1 || h[0].Outcome != fencedstore.Expired || h[0].Attempt != old.Attempt.ID || !h[0].Expires.Equal(old.TokenExpires().Truncate(time.Second)) {
		t.Errorf("history of the key = %+v, want one expired decision by %s expiring at %v", h, old.Attempt.ID, old.TokenExpires())
	}
	if out, code := d.fencecron(t, "", "", "get", "manual/never-written.csv"); code != exitNotFound {
		t.Errorf("get after the expired publish: exit %d, want %d (nothing written): %s", code, exitNotFound, out)
	}
	// The same computation for an attempt granted now gives a live token.
	live := assignment("manual", "manual/{{ .RunID }}.csv", time.Now(), 2)
	if out, code := d.fencecron(t, hook(live), "fresh\n", "publish", "manual/live.csv"); code != 0 {
		t.Fatalf("publish with a live token: exit %d: %s", code, out)
	}

	// A job whose output has no literal directory.
	loose := assignment("loose", "{{ .Job }}-{{ .RunID }}.txt", time.Now(), 3)
	tok := hook(loose)
	st, err := d.sg.Verify(tok)
	if err != nil || st.Scope.Prefix != "loose/" {
		t.Fatalf("the loose job's token: %+v, %v; want scope loose/", st.Scope, err)
	}
	for _, key := range []string{report.Output, "reports/new.csv", "manual/live.csv", "loose-x.txt"} {
		if out, code := d.fencecron(t, tok, "overwritten\n", "publish", key); code != exitError || !strings.Contains(out, "outside the scope") {
			t.Errorf("publish %s with the loose job's token: exit %d, want %d (out of scope): %s", key, code, exitError, out)
		}
	}
	if out, code := d.fencecron(t, "", "", "get", report.Output); code != 0 || strings.Contains(out, "overwritten") {
		t.Errorf("the report %s after the attempt: exit %d: %q", report.Output, code, out)
	}
	if out, code := d.fencecron(t, tok, "mine\n", "publish", "loose/extra.txt"); code != 0 {
		t.Errorf("publish within its own directory: exit %d: %s", code, out)
	}
}

// metricValue reads one sample of a node's /metrics, written as
// name{labels} exactly as the text format has it; false if absent.
func metricValue(t *testing.T, base, sample string) (float64, bool) {
	t.Helper()
	body, err := httpGet(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// A job whose own `fencecron publish` is refused because a newer
// attempt's token already holds the key: the node serving the store
// counts the stale_owner decision and tells the leader, which records the
// refusal against the job's attempt; the attempt ends fenced and the
// cluster counts a stale write refused (the FSM's part of issue 12's
// ledger of refusals).
//
// Two jobs share the scope stale/: late is triggered first (the older
// token) and waits for a file; early is triggered next (a newer token)
// and publishes stale/shared.txt; then the file lets late publish there.
func TestAgent_RefusedJobPublishReachesTheLedger(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	path, httpPort := agentConfig(t, dir, "l1", "ledger-test-cluster-secret-0123456789abc", "", fmt.Sprintf(`store:
  backend: bolt
  serve: true
jobs:
  - name: late
    schedule: "@every 1h"
    shell: 'for i in $(seq 600); do [ -e %q ] && break; sleep 0.1; done; echo late | fencecron publish stale/shared.txt'
    output: 'stale/late-{{ .RunID }}.txt'
    timeout: 2m
  - name: early
    schedule: "@every 1h"
    shell: 'echo early | fencecron publish stale/shared.txt'
    output: 'stale/early-{{ .RunID }}.txt'
`, gate))
	proctest.Start(t, "agent", "agent", "-config", path)
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	trigger := func(job string) jobs.Run {
		t.Helper()
		var run jobs.Run
		proctest.Eventually(t, 30*time.Second, "a trigger of "+job, func() error {
			resp, err := http.Post(base+"/api/v1/jobs/"+job+"/trigger", "", nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return json.NewDecoder(resp.Body).Decode(&run)
		})
		return run
	}
	waitRun := func(job, id string, what string, ok func(jobs.Run) bool) jobs.Run {
		t.Helper()
		var found jobs.Run
		proctest.Eventually(t, 60*time.Second, job+" "+what, func() error {
			var out struct{ Runs []jobs.Run }
			if err := proctest.GetJSON(base+"/api/v1/runs?job="+job, &out); err != nil {
				return err
			}
			for _, r := range out.Runs {
				if r.ID == id && ok(r) {
					found = r
					return nil
				}
			}
			return fmt.Errorf("not yet: %+v", out.Runs)
		})
		return found
	}
	started := func(r jobs.Run) bool { a, ok := r.Latest(); return ok && !a.StartedAt.IsZero() }

	late := trigger("late")
	waitRun("late", late.ID, "running", started)
	early := trigger("early")
	early = waitRun("early", early.ID, "succeeded", func(r jobs.Run) bool { return r.State == jobs.Succeeded })
	newer, _ := early.Latest()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	late = waitRun("late", late.ID, "finished", func(r jobs.Run) bool { return r.State.Terminal() })
	att, _ := late.Latest()
	if !tokenLess(att.Token, newer.Token) {
		t.Fatalf("late's token %s is not older than early's %s: the test set-up is wrong", att.Token, newer.Token)
	}
	if att.ExitCode == nil || *att.ExitCode != exitStaleOwner {
		t.Errorf("late's attempt: exit code %v, stderr %q; want %d, its publish refused as stale_owner", att.ExitCode, att.StderrTail, exitStaleOwner)
	}

	// The node serving the store counted the decision.
	if v, _ := metricValue(t, base, `fencecron_store_decisions_total{outcome="stale_owner"}`); v != 1 {
		t.Errorf("fencecron_store_decisions_total{outcome=\"stale_owner\"} = %v, want 1", v)
	}

	// It told the leader, against late's attempt.
	wantDetail := fmt.Sprintf("stale_owner stale/shared.txt greatest=%s", newer.Token)
	proctest.Eventually(t, 10*time.Second, "a store_refused note of late's attempt", func() error {
		var out struct{ Events []jobs.Event }
		if err := proctest.GetJSON(base+"/api/v1/events?limit=1000", &out); err != nil {
			return err
		}
		for _, e := range out.Events {
			if e.Kind == jobs.NoteStoreRefused && e.Attempt == att.ID && e.Detail == wantDetail {
				return nil
			}
		}
		return fmt.Errorf("none with detail %q among %d events", wantDetail, len(out.Events))
	})

	// The ledger: the attempt ended fenced, and the cluster counts it.
	staleRefused, _ := metricValue(t, base, "fencecron_cluster_stale_writes_refused_total")
	if att.State != jobs.Fenced {
		t.Errorf("late's attempt ended %s (%s), want fenced", att.State, att.Error)
	}
	if staleRefused != 1 {
		t.Errorf("fencecron_cluster_stale_writes_refused_total = %v, want 1", staleRefused)
	}
	if v, _ := metricValue(t, base, "fencecron_cluster_attempts_fenced_total"); v != 1 {
		t.Errorf("fencecron_cluster_attempts_fenced_total = %v, want 1", v)
	}
}

// publishStale waits for a first body at key of the store at base, then
// for a newer run to replace it, and writes again with the first one's
// token: the store must refuse it (409 stale_owner). It returns the first
// body (a job that publishes its own token, as tok does, makes it the
// signed token) and the token the store said wrote it.
func publishStale(t *testing.T, base, key string) (first, firstToken string) {
	t.Helper()
	url := base + "/api/v1/store/" + key
	proctest.Eventually(t, 30*time.Second, "a first body at "+key, func() error {
		b, hdr, err := proctest.Get(url)
		first, firstToken = string(b), hdr.Get("Fencecron-Token")
		return err
	})
	proctest.Eventually(t, 30*time.Second, "a newer run replaced "+key, func() error {
		b, _, err := proctest.Get(url)
		if err == nil && string(b) == first {
			err = fmt.Errorf("still the first body")
		}
		return err
	})
	req, _ := http.NewRequest("PUT", url, strings.NewReader("stale"))
	req.Header.Set("Fencecron-Token", first)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("publish with the older run's token (sent %q; %s wrote the first body) = %d %s, want 409 stale_owner", first, firstToken, resp.StatusCode, answer)
	}
	return first, firstToken
}

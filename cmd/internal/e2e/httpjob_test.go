package e2e

import (
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// hookCall is one request an HTTP job made to the test's service.
type hookCall struct {
	path, method, token, runID, scheduled, team, body string
}

// hookServer records every request, answers /fail with 503 and anything
// else with 200 and a body naming the run.
type hookServer struct {
	mu    sync.Mutex
	calls []hookCall
}

func (h *hookServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	c := hookCall{path: r.URL.Path, method: r.Method, token: r.Header.Get("Fencecron-Token"), runID: r.Header.Get("Fencecron-Run-Id"),
		scheduled: r.Header.Get("Fencecron-Scheduled-At"), team: r.Header.Get("X-Team"), body: string(b)}
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	if r.URL.Path == "/fail" {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "handled %s", c.runID)
}

func (h *hookServer) snapshot(path string) []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookCall
	for _, c := range h.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

// An HTTP job sends its request with the three fence headers; the token
// is the attempt's, signed by the cluster (the service verifies it with
// fencedstore.Signer) and grows from run to run; the response body is
// published to the job's output with that token; an unexpected status
// fails the attempt and names the status; a self-signed server is
// trusted with ca_file and refused without it.
func TestCluster_HTTPJob(t *testing.T) {
	t.Parallel()
	hooks := &hookServer{}
	plain := httptest.NewServer(hooks) // 127.0.0.1
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(hooks)
	defer tlsSrv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	jobsYAML := fmt.Sprintf(`  - name: ping
    schedule: "@every 1s"
    http: {url: %q, method: POST, headers: {X-Team: ops}, body: 'run {{ .RunID }}', expect_status: [200, 204]}
    output: 'pings/{{ .Scheduled.Format "150405" }}.txt'
    history: {runs: 1000}
  - name: down
    schedule: "@yearly"
    http: {url: %q}
  - name: tls-ca
    schedule: "@yearly"
    http: {url: %q, ca_file: %q}
  - name: tls-noca
    schedule: "@yearly"
    http: {url: %q}
`, plain.URL+"/hook", plain.URL+"/fail", tlsSrv.URL+"/tls", caFile, tlsSrv.URL+"/tls")
	c := startCluster(t, localcluster.Options{Servers: 1, Jobs: jobsYAML})
	a := agree(t, c, 30*time.Second)
	n := c.Node(a.Leader)
	signer, err := fencedstore.NewSigner([]byte(c.Secret))
	if err != nil {
		t.Fatal(err)
	}

	// Three succeeded runs of ping, each seen by the service.
	var done []jobs.Run
	proctest.Eventually(t, 60*time.Second, "three succeeded ping runs", func() error {
		runs, err := n.Runs("ping", 100)
		if err != nil {
			return err
		}
		done = done[:0]
		for _, r := range runs {
			if r.State == jobs.Succeeded {
				done = append(done, r)
			}
		}
		if len(done) < 3 {
			return fmt.Errorf("%d succeeded of %d runs", len(done), len(runs))
		}
		return nil
	})
	byRun := map[string]hookCall{}
	for _, call := range hooks.snapshot("/hook") {
		byRun[call.runID] = call
	}
	var prev fencedstore.Token
	for i := len(done) - 1; i >= 0; i-- { // oldest first
		r := done[i]
		att, _ := r.Latest()
		call, ok := byRun[r.ID]
		if !ok {
			t.Fatalf("run %s succeeded but the service saw no request with Fencecron-Run-Id %s", r.ID, r.ID)
		}
		if call.method != "POST" || call.team != "ops" || call.body != "run "+r.ID {
			t.Errorf("run %s: request %s X-Team=%q body %q, want POST, ops, %q", r.ID, call.method, call.team, call.body, "run "+r.ID)
		}
		if want := r.ScheduledAt.UTC().Format(time.RFC3339); call.scheduled != want {
			t.Errorf("run %s: Fencecron-Scheduled-At = %q, want %q", r.ID, call.scheduled, want)
		}
		st, err := signer.Verify(call.token)
		if err != nil {
			t.Fatalf("run %s: the service could not verify Fencecron-Token %q: %v", r.ID, call.token, err)
		}
		if got, want := st.Token, (att.Token); got != want || st.Attempt != att.ID {
			t.Errorf("run %s: header token %s of attempt %s, want %s of %s", r.ID, got, st.Attempt, want, att.ID)
		}
		if !prev.Less(st.Token) {
			t.Errorf("run %s: token %s is not newer than the previous run's %s", r.ID, st.Token, prev)
		}
		prev = st.Token
		// A forged token fails verification.
		if _, err := signer.Verify(strings.Replace(call.token, "v2.", "v2.9", 1)); err == nil {
			t.Errorf("a tampered token verified")
		}
		// The response body is the run's output, published with its token.
		body, hdr, err := proctest.Get(n.URL() + "/api/v1/store/" + r.Output)
		if err != nil {
			t.Fatalf("run %s output %s: %v", r.ID, r.Output, err)
		}
		if got, want := string(body), "handled "+r.ID; got != want {
			t.Errorf("store %s = %q, want %q", r.Output, got, want)
		}
		if att.StoreOutcome != "applied" {
			t.Errorf("run %s store outcome %q, want applied (header token %s)", r.ID, att.StoreOutcome, hdr.Get("Fencecron-Token"))
		}
		// The attempt has its end, its status and the response's size.
		if att.EndedAt.IsZero() || att.Duration() <= 0 || att.HTTPStatus != http.StatusOK || att.ResponseBytes != int64(len(body)) {
			t.Errorf("run %s: ended %s (duration %s), http_status %d, response_bytes %d; want an end, 200 and %d", r.ID, att.EndedAt, att.Duration(), att.HTTPStatus, att.ResponseBytes, len(body))
		}
	}
	// runs shows the duration and the status where an exit code goes.
	if out, err := cli(t, "runs", "ping", "-addr", strings.TrimPrefix(n.URL(), "http://"), "-limit", "5"); err != nil || !strings.Contains(out, "HTTP 200") {
		t.Errorf("runs ping: %v\n%s", err, out)
	}

	// The dashboard shows what the job sends.
	for _, page := range []string{"/jobs", "/jobs/ping"} {
		body, _, err := proctest.Get(n.URL() + page)
		if want := "POST " + plain.URL + "/hook"; err != nil || !strings.Contains(string(body), want) {
			t.Errorf("%s does not show %q: %v", page, want, err)
		}
	}

	// An unexpected status fails the attempt, naming the status.
	for _, tc := range []struct{ job, want string }{
		{"down", "503"},
		{"tls-noca", "certificate"},
	} {
		if err := n.Post("/api/v1/jobs/"+tc.job+"/trigger", nil, nil); err != nil {
			t.Fatal(err)
		}
		r := waitRunDone(t, n, tc.job)
		att, _ := r.Latest()
		if r.State != jobs.Failed || !strings.Contains(att.Error, tc.want) {
			t.Errorf("%s: run %s error %q, want failed naming %q", tc.job, r.State, att.Error, tc.want)
		}
		if att.EndedAt.IsZero() || (tc.job == "down" && att.HTTPStatus != http.StatusServiceUnavailable) {
			t.Errorf("%s: ended %s, http_status %d", tc.job, att.EndedAt, att.HTTPStatus)
		}
	}
	if err := n.Post("/api/v1/jobs/tls-ca/trigger", nil, nil); err != nil {
		t.Fatal(err)
	}
	if r := waitRunDone(t, n, "tls-ca"); r.State != jobs.Succeeded {
		att, _ := r.Latest()
		t.Errorf("tls-ca with ca_file: run %s (%s), want succeeded", r.State, att.Error)
	}
	if got := len(hooks.snapshot("/fail")); got != 1 {
		t.Errorf("the failing service got %d requests, want 1 (retries: 0)", got)
	}
}

// waitRunDone waits for job's newest run to finish and returns it.
func waitRunDone(t *testing.T, n *localcluster.Node, job string) jobs.Run {
	t.Helper()
	var run jobs.Run
	proctest.Eventually(t, 30*time.Second, job+" run finished", func() error {
		runs, err := n.Runs(job, 1)
		if err != nil {
			return err
		}
		if len(runs) == 0 || !runs[0].State.Terminal() {
			return fmt.Errorf("runs %v", runs)
		}
		run = runs[0]
		return nil
	})
	return run
}

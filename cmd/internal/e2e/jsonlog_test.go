package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// logLine is one line of a JSON log, its fields by name.
type logLine map[string]any

func (l logLine) str(k string) string { s, _ := l[k].(string); return s }

// readJSONLog reads a node's log as JSON lines; a line that is not a
// JSON object with time, level and msg is an error.
func readJSONLog(path string) ([]logLine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %d is not JSON (%v): %s", n, err, sc.Bytes())
		}
		if l.str("time") == "" || l.str("level") == "" || l.str("msg") == "" {
			return nil, fmt.Errorf("line %d lacks time, level or msg: %s", n, sc.Bytes())
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// find returns the first line with msg whose fields include want.
func find(lines []logLine, msg string, want map[string]string) (logLine, bool) {
	for _, l := range lines {
		if l.str("msg") != msg {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && l.str(k) == v
		}
		if ok {
			return l, true
		}
	}
	return nil, false
}

// `fencecron dev -log-format json` writes one JSON object a line; the
// lines about a run (granted on the leader, published on the worker, its
// end, a stale write the store refused) name it by run_id, attempt and
// token, and no secret reaches the log: not the API token, the cluster
// secret, a job's signed fence token, nor the credentials in an HTTP
// job's URL and headers, even when that job fails.
func TestDev_JSONLogNamesRunsAndHidesSecrets(t *testing.T) {
	const apiToken = "jsonlog-test-api-token-0123456789-abcdef"
	t.Parallel()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for the test", http.StatusInternalServerError)
	}))
	defer failing.Close()
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	jobsYAML := fmt.Sprintf(`jobs:
  - name: tok
    schedule: "@every 1s"
    shell: 'printf %%s "$FENCECRON_TOKEN"'
    output: out/latest
    history: {runs: 1000}
  - name: leaky
    schedule: "@every 1s"
    http:
      url: %q
      headers: {Authorization: "Bearer HEADERSECRET"}
    history: {runs: 1000}
`, failing.URL+"/PATHSECRET?api_key=QUERYSECRET")
	if err := os.WriteFile(file, []byte(jobsYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	p := proctest.Start(t, "dev", "dev", "-log-format", "json", "-jobs", file, "-data", dataDir, "-api-token", apiToken,
		"-http", strings.TrimPrefix(base, "http://"), "-raft-port", strconv.Itoa(raftPort), "-gossip-port", strconv.Itoa(gossipPort))

	// The first body of out/latest is the signed token of the run that
	// wrote it; once a newer run replaced it, it is written again: stale.
	first, firstToken := publishStale(t, base, "out/latest")

	var run jobs.Run
	var att *jobs.Attempt
	var leaky jobs.Run
	proctest.Eventually(t, 30*time.Second, "the first run of tok, and a failed run of leaky", func() error {
		var out struct{ Runs []jobs.Run }
		if err := proctest.GetJSON(base+"/api/v1/runs?limit=1000", &out); err != nil {
			return err
		}
		run, att, leaky = jobs.Run{}, nil, jobs.Run{}
		for _, r := range out.Runs {
			if a, ok := r.Latest(); ok && r.Job == "tok" && a.Token.String() == firstToken && r.State == jobs.Succeeded {
				run, att = r, a
			}
			if r.Job == "leaky" && r.State == jobs.Failed {
				leaky = r
			}
		}
		if att == nil || leaky.ID == "" {
			return fmt.Errorf("tok's run with token %s succeeded: %v; a failed leaky run: %v", firstToken, att != nil, leaky.ID != "")
		}
		return nil
	})
	leakyAtt, _ := leaky.Latest()

	names := map[string]string{"run_id": run.ID, "attempt": att.ID, "token": att.Token.String()}
	var lines []logLine
	proctest.Eventually(t, 30*time.Second, "the log lines of both runs", func() error {
		var err error
		if lines, err = readJSONLog(p.LogPath); err != nil {
			return err
		}
		for _, msg := range []string{"granted", "published", "attempt finished"} {
			if _, ok := find(lines, msg, names); !ok {
				return fmt.Errorf("no %q line with %v", msg, names)
			}
		}
		refused := map[string]string{"run_id": run.ID, "attempt": att.ID, "token": att.Token.String(), "outcome": "stale_owner"}
		if _, ok := find(lines, "store refused a write", refused); !ok {
			return fmt.Errorf("no refusal line with %v", refused)
		}
		if _, ok := find(lines, "attempt finished", map[string]string{"run_id": leaky.ID, "attempt": leakyAtt.ID, "token": leakyAtt.Token.String(), "state": "failed"}); !ok {
			return fmt.Errorf("no line of leaky's failed attempt %s", leakyAtt.ID)
		}
		return nil
	})

	secret, err := os.ReadFile(filepath.Join(dataDir, secretFile))
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{
		"the API token": apiToken, "the cluster secret": strings.TrimSpace(string(secret)), "a signed fence token": first,
		"the HTTP job's path": "PATHSECRET", "its query": "QUERYSECRET", "its header": "HEADERSECRET",
	} {
		if bytes.Contains(log, []byte(s)) {
			t.Errorf("the log shows %s (%.20s...)", what, s)
		}
	}
}

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// secretJobs holds a credential in every place a job spec hides one.
const secretJobs = `jobs:
  - name: hook
    schedule: "0 0 1 1 *"
    http:
      url: "https://api.example.com:8443/HTTPPATH?api_key=HTTPQUERY"
      method: POST
      headers: {Authorization: "Bearer HEADERVALUE"}
    notify:
      - {on: [failed], webhook: "https://hooks.example.com/WEBHOOKPATH?key=WEBHOOKQUERY"}
      - {on: [failed], slack: "https://hooks.slack.com/services/T000/B000/SLACKPATH"}
`

var secretWords = []string{"HTTPPATH", "HTTPQUERY", "HEADERVALUE", "WEBHOOKPATH", "WEBHOOKQUERY", "SLACKPATH"}

// getAs fetches url, with the API token if token is set.
func getAs(t *testing.T, url, token string) (int, string) {
	t.Helper()
	code, body, err := fetchAs(url, token)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

func fetchAs(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// A real node with an API token: a stranger's reads of the job API and
// the job's page show no notification URL's path or query, no HTTP job
// query string or header value, and the whole set's export is refused;
// the token holder sees them in full, and `apply -dry-run` works with the
// token and says what to do without it. A job's spec over the cap is
// refused, the error naming it, whether the CLI or the API gets it.
func TestDev_ReadsHideSecrets(t *testing.T) {
	const token = "reads-test-api-token-0123456789-abcdef"
	t.Parallel()
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(file, []byte(secretJobs), 0o600); err != nil {
		t.Fatal(err)
	}
	httpPort, raftPort, gossipPort := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	proctest.Start(t, "dev", "dev", "-jobs", file, "-data", t.TempDir(), "-http", addr, "-api-token", token,
		"-raft-port", strconv.Itoa(raftPort), "-gossip-port", strconv.Itoa(gossipPort))
	base := "http://" + addr
	proctest.Eventually(t, 30*time.Second, "dev ready with the file's job", func() error {
		code, body, err := fetchAs(base+"/api/v1/jobs/hook", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /api/v1/jobs/hook = %d: %s", code, body)
		}
		return err
	})

	for _, path := range []string{"/api/v1/jobs", "/api/v1/jobs/hook", "/jobs/hook", "/jobs"} {
		code, body := getAs(t, base+path, "")
		if code != http.StatusOK || !strings.Contains(body, "https://api.example.com:8443") {
			t.Errorf("anonymous GET %s = %d, want 200 naming the HTTP job's host\n%.500s", path, code, body)
		}
		for _, w := range secretWords {
			if strings.Contains(body, w) {
				t.Errorf("anonymous GET %s shows %s", path, w)
			}
		}
	}
	if code, body := getAs(t, base+"/api/v1/jobset", ""); code != http.StatusUnauthorized || strings.Contains(body, "HEADERVALUE") {
		t.Errorf("anonymous GET /api/v1/jobset = %d, want 401\n%.500s", code, body)
	}
	for _, path := range []string{"/api/v1/jobs", "/api/v1/jobs/hook", "/api/v1/jobset", "/api/v1/jobset?applied=true"} {
		code, body := getAs(t, base+path, token)
		if code != http.StatusOK {
			t.Fatalf("GET %s with the token = %d\n%.500s", path, code, body)
		}
		for _, w := range secretWords {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s with the token lacks %s", path, w)
			}
		}
	}

	t.Run("apply -dry-run", func(t *testing.T) {
		out, err := cli(t, "apply", "-dry-run", "-addr", addr, "-token", token, file)
		if err != nil || !strings.Contains(out, "(1 job): 0 added, 0 removed, 0 changed; nothing applied") {
			t.Errorf("apply -dry-run with the token: %v\n%s", err, out)
		}
		_, err = cli(t, "apply", "-dry-run", "-addr", addr, file)
		if err == nil || !strings.Contains(err.Error(), "needs the node's API token") || !strings.Contains(err.Error(), "-token TOKEN or FENCECRON_API_TOKEN") {
			t.Errorf("apply -dry-run without the token: %v, want it to say to pass -token", err)
		}
	})

	t.Run("a spec over the cap", func(t *testing.T) {
		huge := filepath.Join(t.TempDir(), "huge.yaml")
		if err := os.WriteFile(huge, []byte("jobs:\n  - name: huge\n    schedule: \"@daily\"\n    shell: "+strings.Repeat("x", jobs.MaxSpecBytes)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := cli(t, "apply", "-addr", addr, "-token", token, huge)
		if err == nil || !strings.Contains(out+err.Error(), huge+":2:5: jobs[0]: the spec is 257 KiB of JSON; one job's spec is at most 256 KiB (jobs.MaxSpecBytes)") {
			t.Errorf("apply of a spec over the cap: %v\n%s", err, out)
		}
		body := `{"source":"t","jobs":[{"name":"huge","schedules":["@daily"],"shell":"` + strings.Repeat("x", jobs.MaxSpecBytes) + `"}]}`
		req, _ := http.NewRequest(http.MethodPut, base+"/api/v1/jobset", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "at most 256 KiB (jobs.MaxSpecBytes)") {
			t.Errorf("PUT /api/v1/jobset with a spec over the cap = %d, want 400 naming jobs.MaxSpecBytes\n%.500s", resp.StatusCode, b)
		}
		if code, body := getAs(t, base+"/api/v1/jobs/huge", ""); code != http.StatusNotFound {
			t.Errorf("the refused job is there: %d\n%.300s", code, body)
		}
	})
}

package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The client commands send the API token (-token or FENCECRON_API_TOKEN)
// on changes, and to read the whole job set (apply -dry-run), whose
// export holds the jobs' secrets; other reads, and the store with its
// own credentials, never see it.
func TestClient_SendsAPITokenOnChanges(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method+" "+r.URL.Path] = r.Header.Get("Authorization")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/jobs/report/trigger":
			w.Write([]byte(`{"id":"report@x","state":"pending","attempts":[]}`))
		case "/api/v1/jobset":
			if r.Method == http.MethodGet {
				w.Write([]byte(`{"info":{"hash":"h"},"jobs":[]}`))
				return
			}
			w.Write([]byte(`{"hash":"h","jobs":0}`))
		default:
			w.Write([]byte(`{"runs":[],"jobs":[]}`))
		}
	}))
	defer srv.Close()
	jobsFile := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(jobsFile, []byte("jobs: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Setenv("FENCECRON_API_TOKEN", "from-the-environment")
	var out, errOut bytes.Buffer
	for _, args := range [][]string{
		{"trigger", "-addr", srv.URL, "-token", "from-the-flag", "report"},
		{"pause", "-addr", srv.URL, "report"},
		{"apply", "-addr", srv.URL, jobsFile},
		{"apply", "-dry-run", "-addr", srv.URL, "-token", "from-the-flag", jobsFile},
		{"runs", "-addr", srv.URL, "-token", "from-the-flag"},
	} {
		if err := run(t.Context(), args, &out, &errOut); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for req, want := range map[string]string{
		"POST /api/v1/jobs/report/trigger": "Bearer from-the-flag",
		"POST /api/v1/jobs/report/pause":   "Bearer from-the-environment",
		"PUT /api/v1/jobset":               "Bearer from-the-environment",
		"GET /api/v1/jobset":               "Bearer from-the-flag",
		"GET /api/v1/runs":                 "",
	} {
		got, ok := seen[req]
		if !ok {
			t.Errorf("%s never sent (saw %v)", req, seen)
		} else if got != want {
			t.Errorf("%s: Authorization %q, want %q", req, got, want)
		}
	}
}

// `fencecron trigger -force JOB` asks for ?force=true, plain trigger does
// not; an error answer is shown as the API's message, and one that is
// not the API's (a proxy's page) says so.
func TestClient_Trigger(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		switch r.URL.Path {
		case "/api/v1/jobs/report/trigger":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"id":"report@x","state":"pending","attempts":[]}`))
		case "/api/v1/jobs/nope/trigger":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"trigger nope: unknown job","code":"unknown_job"}`))
		default:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(`<html>bad gateway</html>`))
		}
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	for _, args := range [][]string{
		{"trigger", "-addr", srv.URL, "report"},
		{"trigger", "-addr", srv.URL, "-force", "report"},
	} {
		if err := run(t.Context(), args, &out, &errOut); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut.String())
		}
	}
	mu.Lock()
	if got := strings.Join(queries, ","); got != ",force=true" {
		t.Errorf("queries %q, want none, then force=true", got)
	}
	mu.Unlock()
	if err := run(t.Context(), []string{"trigger", "-addr", srv.URL, "nope"}, &out, &errOut); err == nil || !strings.HasSuffix(err.Error(), ": trigger nope: unknown job") {
		t.Errorf("trigger nope: %v, want the API's message", err)
	}
	if err := run(t.Context(), []string{"trigger", "-addr", srv.URL, "gw"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "unexpected answer 502") {
		t.Errorf("trigger through a failing proxy: %v, want it called an unexpected answer", err)
	}
}

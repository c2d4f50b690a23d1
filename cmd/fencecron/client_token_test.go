package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The client commands send the API token (-token or FENCECRON_API_TOKEN)
// on changes only: reads, and the store with its own credentials, never
// see it.
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

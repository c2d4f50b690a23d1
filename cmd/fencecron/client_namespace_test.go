package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// -namespace (or FENCECRON_NAMESPACE) goes with every request about jobs
// and runs, and with none other.
func TestClient_SendsNamespace(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method+" "+r.URL.Path] = r.URL.Query().Get("namespace")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/jobs/report/trigger":
			w.Write([]byte(`{"id":"billing:report@x","state":"pending","attempts":[]}`))
		case "/api/v1/status":
			w.Write([]byte(`{"node":"n1"}`))
		default:
			w.Write([]byte(`{"runs":[],"jobs":[]}`))
		}
	}))
	defer srv.Close()
	t.Setenv("FENCECRON_NAMESPACE", "billing")
	var out, errOut bytes.Buffer
	for _, args := range [][]string{
		{"trigger", "-addr", srv.URL, "report"},
		{"jobs", "-addr", srv.URL, "-namespace", "sales"},
		{"runs", "-addr", srv.URL, "report"},
		{"status", "-addr", srv.URL},
	} {
		if err := run(t.Context(), args, &out, &errOut); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for req, want := range map[string]string{
		"POST /api/v1/jobs/report/trigger": "billing",
		"GET /api/v1/jobs":                 "sales",
		"GET /api/v1/runs":                 "billing",
		"GET /api/v1/status":               "",
	} {
		if got, ok := seen[req]; !ok || got != want {
			t.Errorf("%s: namespace %q (sent: %v), want %q", req, got, ok, want)
		}
	}
	if err := run(t.Context(), []string{"jobs", "-addr", srv.URL, "-namespace", "Bad/NS"}, &out, &errOut); err == nil {
		t.Error("jobs -namespace Bad/NS: no error")
	}
}

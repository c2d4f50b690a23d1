package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The acl commands send what the API takes and print a secret once; a
// read refused for want of a token (a node with ACLs on) is asked again
// with it.
func TestACL_Commands(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Method+" "+r.URL.Path] = string(body) + "|" + r.Header.Get("Authorization")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /api/v1/acl/bootstrap":
			w.Write([]byte(`{"accessor":"acc1","secret":"fct_s1","name":"bootstrap"}`))
		case "PUT /api/v1/acl/policies/team-a":
			w.Write([]byte(`{"name":"team-a","rules":[]}`))
		case "POST /api/v1/acl/tokens":
			w.Write([]byte(`{"accessor":"acc2","secret":"fct_s2","name":"ci","policies":["team-a"]}`))
		case "GET /api/v1/acl/tokens":
			if r.Header.Get("Authorization") == "" {
				w.WriteHeader(http.StatusForbidden)
				w.Write([]byte(`{"error":"forbidden: an anonymous request lacks capability management","code":"forbidden","missing":"management"}`))
				return
			}
			w.Write([]byte(`{"tokens":[{"accessor":"acc2","name":"ci","policies":["team-a"],"created_at":"2026-01-01T00:00:00Z"}]}`))
		case "DELETE /api/v1/acl/tokens/acc2":
			w.Write([]byte(`{"revoked":"acc2"}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"not found","code":"no_route"}`))
		}
	}))
	defer srv.Close()
	policy := filepath.Join(t.TempDir(), "team-a.yaml")
	if err := os.WriteFile(policy, []byte("rules:\n  - namespace: team-a\n    capabilities: [read, trigger]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - namespace: team-a\n    capabilities: [read, launch]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"acl", "bootstrap", "-addr", srv.URL}, "secret    fct_s1"},
		{[]string{"acl", "policy", "apply", "-addr", srv.URL, "-token", "fct_s1", "team-a", policy}, "policy team-a applied"},
		{[]string{"acl", "token", "create", "-addr", srv.URL, "-token", "fct_s1", "-name", "ci", "-policy", "team-a", "-ttl", "24h"}, "secret    fct_s2"},
		{[]string{"acl", "token", "list", "-addr", srv.URL, "-token", "fct_s1"}, "acc2"},
		{[]string{"acl", "token", "revoke", "-addr", srv.URL, "-token", "fct_s1", "acc2"}, "token acc2 revoked"},
	} {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), tc.args, &out, &errOut); err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, errOut.String())
		}
		if !strings.Contains(out.String(), tc.says) {
			t.Errorf("%v printed %q, want %q", tc.args, out.String(), tc.says)
		}
	}
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"acl", "policy", "apply", "-addr", srv.URL, "team-b", bad}, &out, &errOut); err == nil || !strings.Contains(err.Error(), `unknown capability "launch"`) {
		t.Errorf("bad policy: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var req struct {
		Name     string
		Policies []string
		TTL      string
	}
	b, _, _ := strings.Cut(seen["POST /api/v1/acl/tokens"], "|")
	if err := json.Unmarshal([]byte(b), &req); err != nil || req.Name != "ci" || strings.Join(req.Policies, ",") != "team-a" || req.TTL != "24h" {
		t.Errorf("token create sent %s", b)
	}
	if got := seen["GET /api/v1/acl/tokens"]; !strings.HasSuffix(got, "|Bearer fct_s1") {
		t.Errorf("token list, asked again, sent %q", got)
	}
	if _, ok := seen["PUT /api/v1/acl/policies/team-b"]; ok {
		t.Error("a bad policy was sent")
	}
}

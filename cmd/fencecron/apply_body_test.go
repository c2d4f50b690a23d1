package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// The body `fencecron apply` streams is what json.Marshal makes of the
// request, for a set spanning several encoding windows and for none.
func TestWriteJobSetRequest(t *testing.T) {
	big := make([]jobs.Spec, 10000)
	for i := range big {
		big[i] = jobs.Spec{Name: fmt.Sprintf("job-%d", i), Schedules: []string{"@daily"}, Command: []string{"/bin/echo", "<&>"}}
		big[i].Normalize()
	}
	for name, specs := range map[string][]jobs.Spec{"nil": nil, "empty": {}, "big": big} {
		want, err := json.Marshal(wire.JobSetRequest{Source: `apply "x" from <h>`, Jobs: specs})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := writeJobSetRequest(&b, `apply "x" from <h>`, specs); err != nil {
			t.Fatal(err)
		}
		if got := b.String(); got != string(want) {
			t.Errorf("%s: body differs from json.Marshal of the request:\n%.200s\nwant\n%.200s", name, got, want)
		}
	}
}

// apply against a node of an earlier version, which has no PUT
// /api/v1/jobset/digests (it answers no_route), sends the whole set to PUT
// /api/v1/jobset, as that version expects; and a node holding fewer than
// half the file's jobs gets the whole set without an exchange of digests.
func TestApply_WholeSetWhereDigestsCannotServe(t *testing.T) {
	for _, tc := range []struct {
		name        string
		nodeJobs    int
		wantDigests bool
	}{
		{"node of an earlier version", 3, true},
		{"node lacking most jobs", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var paths []string
			var whole wire.JobSetRequest
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				paths = append(paths, r.Method+" "+r.URL.Path)
				w.Header().Set("Content-Type", "application/json")
				switch r.Method + " " + r.URL.Path {
				case "GET /api/v1/status":
					fmt.Fprintf(w, `{"jobs":{"count":%d}}`, tc.nodeJobs)
				case "PUT /api/v1/jobset":
					if err := json.NewDecoder(r.Body).Decode(&whole); err != nil {
						t.Error(err)
					}
					fmt.Fprintf(w, `{"hash":"h","jobs":%d}`, len(whole.Jobs))
				default:
					status, _ := wire.StatusOf(wire.ErrNoRoute)
					w.WriteHeader(status)
					json.NewEncoder(w).Encode(wire.Body(wire.ErrNoRoute))
				}
			}))
			defer srv.Close()
			file := filepath.Join(t.TempDir(), "jobs.yaml")
			if err := os.WriteFile(file, []byte(`jobs:
  - {name: a, schedule: "@daily", shell: "true"}
  - {name: b, schedule: "@daily", shell: "true"}
  - {name: c, schedule: "@daily", shell: "true"}
`), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if err := run(t.Context(), []string{"apply", "-addr", srv.URL, file}, &out, &errOut); err != nil {
				t.Fatalf("apply: %v\n%s", err, errOut.String())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(whole.Jobs) != 3 || !strings.Contains(out.String(), "applied 3 jobs") || strings.Contains(out.String(), "sent") {
				t.Errorf("the node got %d jobs whole, and apply said %q; want 3, and no word of jobs sent by digest", len(whole.Jobs), out.String())
			}
			if got := slices.Contains(paths, "PUT /api/v1/jobset/digests"); got != tc.wantDigests {
				t.Errorf("requests %v: digests sent %v, want %v", paths, got, tc.wantDigests)
			}
		})
	}
}

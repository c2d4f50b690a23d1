package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// skipState answers Skips from a fixed list; every other State method is
// unused by these tests.
type skipState struct {
	State
	ranges []jobs.SkipRange
}

func (s skipState) Skips(job string) []jobs.SkipRange {
	var out []jobs.SkipRange
	for _, r := range s.ranges {
		if job == "" || r.Job == job {
			out = append(out, r)
		}
	}
	return out
}

func TestServer_Skips(t *testing.T) {
	at := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	st := skipState{ranges: []jobs.SkipRange{
		{Job: "a", From: at, To: at.Add(2 * time.Second), Count: 3, Reason: "missed (misfire: skip)"},
		{Job: "b", From: at, To: at, Count: 1, Reason: "older than catchup_window 1h0m0s"},
	}}
	srv := httptest.NewServer((&Server{State: st}).Handler())
	defer srv.Close()
	for _, tc := range []struct {
		query string
		want  int
	}{{"", 2}, {"?job=a", 1}, {"?job=none", 0}} {
		t.Run(tc.query, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/api/v1/skips" + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out struct{ Skips []jobs.SkipRange }
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			if got, want := resp.StatusCode, http.StatusOK; got != want {
				t.Fatalf("status %d, want %d", got, want)
			}
			if out.Skips == nil {
				t.Fatal("skips is null, want a list")
			}
			if got := len(out.Skips); got != tc.want {
				t.Fatalf("%d ranges, want %d: %+v", got, tc.want, out.Skips)
			}
			if tc.want == 1 && (out.Skips[0].Count != 3 || out.Skips[0].Reason == "") {
				t.Errorf("range %+v, want a's with count and reason", out.Skips[0])
			}
		})
	}
}

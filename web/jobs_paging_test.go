package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// GET /api/v1/jobs pages by an opaque cursor and searches; a set that
// fits a page is answered whole, as before paging.
func TestServer_JobsPaging(t *testing.T) {
	f := newFixture(t)
	list := func(t *testing.T, query string) wire.JobList {
		t.Helper()
		code, _, body := f.do(t, http.MethodGet, "/api/v1/jobs"+query, "")
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/jobs%s = %d\n%s", query, code, body)
		}
		var l wire.JobList
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	names := func(l wire.JobList) string {
		var out []string
		for _, j := range l.Jobs {
			out = append(out, j.Name)
		}
		return strings.Join(out, ",")
	}

	t.Run("whole set without parameters", func(t *testing.T) {
		l := list(t, "")
		if got, want := names(l), "heartbeat,report"; got != want || l.Next != "" || l.Total != 2 {
			t.Errorf("jobs = %s (next %q, total %d), want %s and no next", got, l.Next, l.Total, want)
		}
	})
	t.Run("cursor", func(t *testing.T) {
		l := list(t, "?limit=1")
		if got := names(l); got != "heartbeat" || l.Next == "" {
			t.Fatalf("first page = %s, next %q", got, l.Next)
		}
		l = list(t, "?limit=1&cursor="+url.QueryEscape(l.Next))
		if got := names(l); got != "report" || l.Next != "" {
			t.Errorf("second page = %s, next %q; want report and no next", got, l.Next)
		}
	})
	t.Run("search", func(t *testing.T) {
		if l := list(t, "?q=REP"); names(l) != "report" || l.Matched != 1 || l.Total != 2 {
			t.Errorf("q=REP: %s, matched %d of %d", names(l), l.Matched, l.Total)
		}
		if l := list(t, "?state=failed"); names(l) != "heartbeat" {
			t.Errorf("state=failed: %s, want heartbeat", names(l))
		}
		if l := list(t, "?state=never"); names(l) != "" {
			t.Errorf("state=never: %s, want none", names(l))
		}
	})
	t.Run("bad parameters", func(t *testing.T) {
		for _, q := range []string{"?limit=0", "?limit=5001", "?cursor=nonsense", "?state=sleepy", "?paused=maybe"} {
			if code, _, body := f.do(t, http.MethodGet, "/api/v1/jobs"+q, ""); code != http.StatusBadRequest {
				t.Errorf("GET /api/v1/jobs%s = %d, want 400\n%s", q, code, body)
			}
		}
	})
}

// The Jobs page shows one page of a large set, with a link to the next,
// and finds jobs by name.
func TestServer_JobsPagePaging(t *testing.T) {
	f := newFixture(t)
	f.state.mu.Lock()
	for i := range 250 {
		f.state.specs = append(f.state.specs, jobs.Spec{Name: fmt.Sprintf("bulk-%03d", i), Schedules: []string{"@every 1h"}, Shell: "true"})
	}
	f.state.mu.Unlock()

	code, _, body := f.get(t, "/jobs")
	if code != http.StatusOK {
		t.Fatalf("GET /jobs = %d", code)
	}
	if got, want := strings.Count(body, `<tr class="job`), jobsPageSize; got != want {
		t.Errorf("first page shows %d jobs, want %d", got, want)
	}
	if !strings.Contains(body, `data-job="bulk-000"`) || strings.Contains(body, `data-job="report"`) {
		t.Errorf("first page is not the first %d by name", jobsPageSize)
	}
	i := strings.Index(body, `class="next" rel="next" href="`)
	if i < 0 {
		t.Fatal("first page has no link to the next")
	}
	next := body[i+len(`class="next" rel="next" href="`):]
	next = strings.ReplaceAll(next[:strings.IndexByte(next, '"')], "&amp;", "&")
	_, _, body = f.get(t, next)
	if !strings.Contains(body, `data-job="bulk-100"`) || strings.Contains(body, `data-job="bulk-099"`) || !strings.Contains(body, `« first page`) {
		t.Errorf("GET %s is not the second page", next)
	}

	_, _, body = f.get(t, "/jobs?q=heart")
	if got := strings.Count(body, `<tr class="job`); got != 1 || !strings.Contains(body, `data-job="heartbeat"`) || !strings.Contains(body, "1 of 252 jobs match") {
		t.Errorf("search for heart shows %d jobs:\n%.2000s", got, body)
	}
}

// In a set of more than 1000 jobs, /metrics exports the paused jobs only,
// so that a scrape stays small whatever the set's size.
func TestServer_MetricsPausedSeriesBounded(t *testing.T) {
	f := newFixture(t)
	f.state.mu.Lock()
	for i := range 1500 {
		f.state.specs = append(f.state.specs, jobs.Spec{Name: fmt.Sprintf("bulk-%04d", i), Schedules: []string{"@every 1h"}, Shell: "true", Paused: i == 7})
	}
	f.state.mu.Unlock()
	s, _ := scrape(t, f)
	var paused []string
	for k := range s {
		if strings.HasPrefix(k, "fencecron_cluster_job_paused{") {
			paused = append(paused, k)
		}
	}
	slices.Sort(paused)
	want := []string{`fencecron_cluster_job_paused{job_name="bulk-0007"}`, `fencecron_cluster_job_paused{job_name="heartbeat"}`}
	if !slices.Equal(paused, want) {
		t.Errorf("paused series = %v, want %v", paused, want)
	}
}

// jobsPageSize is web/pages': the jobs one Jobs page shows.
const jobsPageSize = 100

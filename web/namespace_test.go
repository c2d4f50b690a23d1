package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// The API names a namespaced job by its qualified name, shows every
// job's namespace, filters the list by ?namespace= and resolves a job
// route's name in it; the dashboard shows the namespace beside the name.
func TestServer_Namespaces(t *testing.T) {
	f := newFixture(t)
	billing := jobs.Spec{Name: "report", Namespace: "billing", Schedules: []string{"@every 30s"}, Shell: "true", Output: "reports/{{ .RunID }}.txt"}
	billing.Normalize()
	f.state.mu.Lock()
	f.state.specs = append(f.state.specs, billing)
	f.state.runs = append([]jobs.Run{{ID: "billing:report@20260801T090000Z", Job: "billing:report", ScheduledAt: t0, State: jobs.Succeeded, Trigger: "schedule"}}, f.state.runs...)
	f.state.mu.Unlock()
	tests := []struct {
		path     string
		code     int
		want     []string
		wantNone []string
	}{
		{"/api/v1/jobs", 200, []string{`"name": "billing:report"`, `"namespace": "billing"`, `"namespace": "default"`}, nil},
		{"/api/v1/jobs?namespace=billing", 200, []string{`"name": "billing:report"`, `"matched": 1`}, []string{`"name": "report"`}},
		{"/api/v1/jobs?namespace=default", 200, []string{`"name": "report"`, `"name": "heartbeat"`}, []string{`billing:report`}},
		{"/api/v1/jobs?namespace=Bad/x", 400, []string{`namespace \"Bad/x\": want a DNS label`}, nil},
		{"/api/v1/jobs/report?namespace=billing", 200, []string{`"name": "billing:report"`, `"output": "reports/{{ .RunID }}.txt"`}, nil},
		{"/api/v1/jobs/billing:report", 200, []string{`"name": "billing:report"`}, nil},
		{"/api/v1/jobs/sales:report?namespace=billing", 400, []string{`is of namespace sales, not billing`}, nil},
		{"/api/v1/jobs/heartbeat?namespace=billing", 404, []string{`"job \"billing:heartbeat\": not found"`}, nil},
		{"/api/v1/runs?namespace=billing", 200, []string{`"id": "billing:report@20260801T090000Z"`}, []string{`"id": "report@`, `"id": "heartbeat@`}},
		{"/api/v1/runs?namespace=default", 200, []string{`"id": "report@20260801T090000Z"`, `"id": "heartbeat@`}, []string{`billing:report@`}},
		{"/api/v1/runs?job=report&namespace=billing", 200, []string{`"id": "billing:report@20260801T090000Z"`}, []string{`"id": "report@`}},
		{"/api/v1/runs?namespace=x/y", 400, []string{`namespace \"x/y\"`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, _, body := f.do(t, http.MethodGet, tt.path, "")
			if code != tt.code {
				t.Fatalf("GET %s = %d, want %d\n%s", tt.path, code, tt.code, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s lacks %q:\n%.1200s", tt.path, w, body)
				}
			}
			for _, w := range tt.wantNone {
				if strings.Contains(body, w) {
					t.Errorf("GET %s has %q:\n%.1200s", tt.path, w, body)
				}
			}
		})
	}
	code, _, body := f.do(t, http.MethodGet, "/jobs", "", "Accept", "text/html")
	if code != 200 || !strings.Contains(body, `billing:report</b></a> <span class="tag ns" title="namespace">namespace billing</span>`) {
		t.Errorf("GET /jobs = %d, want the namespace beside billing:report:\n%.3000s", code, body)
	}
	if strings.Contains(body, "namespace default") {
		t.Error("GET /jobs shows the default namespace")
	}
	code, _, body = f.do(t, http.MethodGet, "/jobs/billing:report", "", "Accept", "text/html")
	if code != 200 || !strings.Contains(body, `namespace billing</span>`) {
		t.Errorf("GET /jobs/billing:report = %d, want the namespace:\n%.2000s", code, body)
	}
}

// Actions on a job take its name within ?namespace=.
func TestServer_NamespaceActions(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{
		"/api/v1/jobs/report/trigger?namespace=billing",
		"/api/v1/jobs/report/pause?namespace=billing",
		"/api/v1/jobs/billing:report/resume",
		"/api/v1/jobs/report/trigger",
	} {
		// The fake knows no job to pause: what matters is the name it is
		// asked for.
		f.do(t, http.MethodPost, path, "")
	}
	if got, want := strings.Join(f.sched.Calls(), ","), "trigger billing:report,pause billing:report,resume billing:report,trigger report"; got != want {
		t.Errorf("the scheduler saw %q, want %q", got, want)
	}
}

// The jobs page lists one namespace's jobs, and its pages keep the
// filter.
func TestServer_JobsPageByNamespace(t *testing.T) {
	f := newFixture(t)
	f.state.mu.Lock()
	for _, n := range []string{"a", "b", "c"} {
		s := jobs.Spec{Name: n, Namespace: "billing", Schedules: []string{"@every 30s"}, Shell: "true"}
		s.Normalize()
		f.state.specs = append(f.state.specs, s)
	}
	f.state.mu.Unlock()
	code, _, body := f.do(t, http.MethodGet, "/jobs?namespace=billing&limit=2", "", "Accept", "text/html")
	if code != 200 || !strings.Contains(body, `billing:a</b>`) || strings.Contains(body, `>heartbeat</b>`) {
		t.Fatalf("GET /jobs?namespace=billing = %d:\n%.3000s", code, body)
	}
	if !strings.Contains(body, `namespace=billing`) || !strings.Contains(body, `rel="next"`) {
		t.Errorf("the next page's link drops the namespace:\n%.4000s", body)
	}
}

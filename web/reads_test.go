package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// secretSpec is a job whose spec holds a credential in every place one
// hides: a webhook's user info, path and query, a Slack URL's path, an
// HTTP job's path and query, and its header value.
func secretSpec() jobs.Spec {
	s := jobs.Spec{Name: "hook", Schedules: []string{"@daily"},
		Notify: []jobs.Notify{
			{On: []string{"failed"}, Webhook: "https://user:USERINFO@hooks.example.com/WEBHOOKPATH?key=WEBHOOKQUERY"},
			{On: []string{"failed"}, Slack: "https://hooks.slack.com/services/T000/B000/SLACKPATH"},
			{On: []string{"failed"}, Email: []string{"ops@example.com"}},
		},
		HTTP: &jobs.HTTP{URL: "https://api.example.com:8443/HTTPPATH?api_key=HTTPQUERY", Method: "POST",
			Headers: map[string]string{"Authorization": "Bearer HEADERVALUE"}},
	}
	s.Normalize()
	return s
}

// The secrets of secretSpec, and what shows of them without the token.
var (
	secretWords = []string{"USERINFO", "WEBHOOKPATH", "WEBHOOKQUERY", "SLACKPATH", "HTTPPATH", "HTTPQUERY", "HEADERVALUE"}
	// The pages show an HTTP job's URL only.
	pageSecretWords = []string{"HTTPPATH", "HTTPQUERY"}
	redactedShows   = []string{`"https://hooks.example.com"`, `"https://hooks.slack.com"`, `"https://api.example.com:8443"`, `"Authorization": "(hidden)"`, `ops@example.com`}
)

func (f *fakeState) addSpec(s jobs.Spec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.specs = append(f.specs, s)
}

// Without the API token, GET /api/v1/jobs, /api/v1/jobs/{name}, the Jobs
// page and the job's page show notification targets, an HTTP job's URL
// with scheme and host only, and no header value; the whole set's export
// is refused, naming the token. With the token (a Bearer header, or a
// dashboard login) everything shows in full. The replicated spec itself
// is never changed.
func TestServer_ReadsHideSecrets(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.APIToken = testToken })
	f.state.addSpec(secretSpec())
	bearer := []string{"Authorization", "Bearer " + testToken}
	api := []string{"/api/v1/jobs", "/api/v1/jobs/hook"}
	pages := []string{"/jobs", "/jobs/hook"}

	t.Run("anonymous", func(t *testing.T) {
		for _, path := range append(slices.Clone(api), pages...) {
			code, _, body := f.do(t, "GET", path, "")
			if code != http.StatusOK {
				t.Fatalf("GET %s = %d\n%s", path, code, body)
			}
			for _, w := range secretWords {
				if strings.Contains(body, w) {
					t.Errorf("GET %s shows %s to a reader without the token", path, w)
				}
			}
			want := redactedShows
			if !strings.HasPrefix(path, "/api/") {
				want = []string{"https://api.example.com:8443"}
			}
			for _, w := range want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s lacks %s", path, w)
				}
			}
		}
		if _, _, body := f.do(t, "GET", "/api/v1/jobs/hook", ""); !strings.Contains(body, `"redacted": true`) {
			t.Errorf("a redacted job does not say so:\n%s", body)
		}
		if _, _, body := f.do(t, "GET", "/api/v1/jobs/report", ""); strings.Contains(body, `"redacted"`) {
			t.Errorf("a job with nothing to hide says it is redacted:\n%s", body)
		}
		if _, _, page := f.get(t, "/jobs/hook"); !strings.Contains(page, "log in") || !strings.Contains(page, "scheme and host only") {
			t.Errorf("the job page does not say its secrets are hidden")
		}
		code, hdr, body := f.do(t, "GET", "/api/v1/jobset", "")
		if code != http.StatusUnauthorized || !strings.Contains(body, "needs the API token") || hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("anonymous GET /api/v1/jobset = %d, want 401 naming the token\n%s", code, body)
		}
		for _, w := range secretWords {
			if strings.Contains(body, w) {
				t.Errorf("the refused export shows %s", w)
			}
		}
	})

	t.Run("token holder", func(t *testing.T) {
		for _, path := range append(slices.Clone(api), "/api/v1/jobset") {
			code, _, body := f.do(t, "GET", path, "", bearer...)
			if code != http.StatusOK {
				t.Fatalf("GET %s with the token = %d\n%s", path, code, body)
			}
			for _, w := range secretWords {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s with the token lacks %s", path, w)
				}
			}
			if strings.Contains(body, `"redacted"`) {
				t.Errorf("GET %s with the token says redacted", path)
			}
		}
		cookie, _ := login(t, f)
		for _, path := range pages {
			_, _, page := f.get(t, path, "Cookie", cookie)
			for _, w := range pageSecretWords {
				if !strings.Contains(page, w) {
					t.Errorf("GET %s logged in lacks %s", path, w)
				}
			}
		}
	})

	t.Run("a wrong token is refused, not redacted", func(t *testing.T) {
		for _, path := range []string{"/api/v1/jobs", "/api/v1/jobset"} {
			if code, _, body := f.do(t, "GET", path, "", "Authorization", "Bearer not-the-token"); code != http.StatusUnauthorized {
				t.Errorf("GET %s with a wrong token = %d, want 401\n%.300s", path, code, body)
			}
		}
	})

	spec, _ := f.state.Spec("hook")
	if want := secretSpec(); spec.Notify[0].Webhook != want.Notify[0].Webhook || spec.Notify[1].Slack != want.Notify[1].Slack ||
		spec.HTTP.URL != want.HTTP.URL || spec.HTTP.Headers["Authorization"] != want.HTTP.Headers["Authorization"] {
		t.Errorf("reading changed the replicated spec: %+v %+v", spec.Notify, spec.HTTP)
	}
}

// On a node without an API token, clients on its host see everything (as
// they may change everything); others see what a reader without the
// token sees, and may not export the whole set (403 naming api.token).
func TestServer_ReadsWithoutToken(t *testing.T) {
	f := newFixture(t)
	f.state.addSpec(secretSpec())
	if code, _, body := f.do(t, "GET", "/api/v1/jobset", ""); code != http.StatusOK || !strings.Contains(body, "HEADERVALUE") {
		t.Errorf("GET /api/v1/jobset from the node's host = %d, want the whole set\n%.300s", code, body)
	}
	const stranger = "192.0.2.7:5000"
	for _, path := range []string{"/api/v1/jobs", "/api/v1/jobs/hook", "/jobs/hook"} {
		rec := serve(f, "GET", path, "", stranger, "10.0.0.1:8080")
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s from another host = %d\n%s", path, rec.Code, rec.Body)
		}
		for _, w := range secretWords {
			if strings.Contains(rec.Body.String(), w) {
				t.Errorf("GET %s from another host shows %s", path, w)
			}
		}
	}
	rec := serve(f, "GET", "/api/v1/jobset", "", stranger, "10.0.0.1:8080")
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "api.token") || strings.Contains(rec.Body.String(), "HEADERVALUE") {
		t.Errorf("GET /api/v1/jobset from another host = %d, want 403 naming api.token\n%.300s", rec.Code, rec.Body)
	}
}

// At most maxJobSetExports exports are written at once: one more is
// answered 503 with Retry-After and counted; once they end, the next one
// is served.
func TestServer_JobSetExportLimit(t *testing.T) {
	f := newFixture(t, func(s *Server) { s.APIToken = testToken })
	inside := make(chan struct{}, 2*maxJobSetExports)
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer let()
	f.state.exporting = func() {
		inside <- struct{}{}
		<-release
	}
	// Without a limit the next export would wait with the others: the
	// client gives up instead, and the test fails.
	client := &http.Client{Timeout: 10 * time.Second}
	export := func() (int, http.Header, string, error) {
		req, err := http.NewRequest("GET", f.http.URL+"/api/v1/jobset", nil)
		if err != nil {
			return 0, nil, "", err
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b), err
	}
	codes := make(chan string, maxJobSetExports)
	for range maxJobSetExports {
		go func() {
			code, _, _, err := export()
			codes <- fmt.Sprint(code, err)
		}()
	}
	deadline := time.After(10 * time.Second)
	for i := range maxJobSetExports {
		select {
		case <-inside:
		case <-deadline:
			t.Fatalf("only %d of %d exports started", i, maxJobSetExports)
		}
	}
	code, hdr, body, err := export()
	if err != nil || code != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "1" || !strings.Contains(body, "try again") {
		t.Errorf("export %d while %d run = %d (Retry-After %q, %v), want 503 with Retry-After 1\n%s", maxJobSetExports+1, maxJobSetExports, code, hdr.Get("Retry-After"), err, body)
	}
	let()
	for range maxJobSetExports {
		if got := <-codes; got != "200 <nil>" {
			t.Errorf("an export that held a place ended %s, want 200", got)
		}
	}
	if code, _, body, err := export(); code != http.StatusOK || err != nil {
		t.Errorf("an export after the others ended = %d (%v), want 200\n%.300s", code, err, body)
	}
	if _, _, metrics := f.get(t, "/metrics"); !strings.Contains(metrics, "fencecron_http_jobset_exports_refused_total 1") {
		t.Errorf("the refused export is not counted")
	}
}

// writeSizes is a ResponseWriter that records the largest single write.
type writeSizes struct {
	*httptest.ResponseRecorder
	largest, total int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.largest, w.total = max(w.largest, len(p)), w.total+len(p)
	return w.ResponseRecorder.Write(p)
}

func (w *writeSizes) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

// The export and a page of GET /api/v1/jobs are written as they are
// encoded, never built whole: no write is larger than a buffer, though
// the answers are megabytes. The export says which jobs an operator
// paused as the API always did: paused in each spec, or, with
// ?applied=true, paused as applied and listed beside.
func TestServer_LargeAnswersStream(t *testing.T) {
	f := newFixture(t)
	const n = 20000
	script := strings.Repeat("echo step; ", 20)
	f.state.mu.Lock()
	f.state.specs = nil
	for i := range n {
		s := jobs.Spec{Name: fmt.Sprintf("job-%05d", i), Schedules: []string{"@daily"}, Shell: script}
		s.Normalize()
		f.state.specs = append(f.state.specs, s)
	}
	f.state.operatorPaused = []string{"job-00007"}
	f.state.mu.Unlock()

	get := func(path string) *writeSizes {
		t.Helper()
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr, req.Host = "127.0.0.1:5000", "127.0.0.1:8080"
		rec := &writeSizes{ResponseRecorder: httptest.NewRecorder()}
		f.srv.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d\n%.300s", path, rec.Code, rec.Body)
		}
		if rec.total < 1<<20 || rec.largest > 64<<10 {
			t.Errorf("GET %s: %d bytes, the largest write %d bytes: want over 1 MiB in writes of at most 64 KiB", path, rec.total, rec.largest)
		}
		return rec
	}
	for _, applied := range []bool{false, true} {
		path := "/api/v1/jobset"
		if applied {
			path += "?applied=true"
		}
		var set wire.JobSet
		if err := json.Unmarshal(get(path).Body.Bytes(), &set); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if len(set.Jobs) != n || set.Info.Count != n || set.Jobs[n-1].Name != fmt.Sprintf("job-%05d", n-1) {
			t.Fatalf("GET %s: %d jobs (info %+v), want %d", path, len(set.Jobs), set.Info, n)
		}
		if got := set.Jobs[7].Paused; got == applied {
			t.Errorf("GET %s: the operator-paused job shows paused %v", path, got)
		}
		if set.Jobs[8].Paused {
			t.Errorf("GET %s: a job nobody paused shows paused", path)
		}
		if want := []string{"job-00007"}; applied != slices.Equal(set.OperatorPaused, want) {
			t.Errorf("GET %s: operator_paused %q", path, set.OperatorPaused)
		}
	}
	var list wire.JobList
	if err := json.Unmarshal(get("/api/v1/jobs?limit=5000").Body.Bytes(), &list); err != nil || len(list.Jobs) != 5000 || list.Next == "" || list.Total != n {
		t.Errorf("GET /api/v1/jobs?limit=5000: %d jobs, next %q, total %d (%v)", len(list.Jobs), list.Next, list.Total, err)
	}
}

// maxJobSetExports is web/api's: the exports of the whole job set a node
// writes at once.
const maxJobSetExports = 4

package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
)

var t0 = time.Date(2026, 8, 1, 9, 0, 0, 0, time.UTC)

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

// writeJobList writes what writeJSON writes of the same list, byte for
// byte: streaming changed nothing a client or a script reads.
func TestWriteJobList_AsWriteJSON(t *testing.T) {
	one := apiJob(secretSpec(), &jobs.Run{ID: "hook@x", State: jobs.Failed}, t0, false)
	two := apiJob(jobs.Spec{Name: "b<&>", Shell: "echo \"<x>\""}, nil, t0, true)
	for name, l := range map[string]wire.JobList{
		"empty":     {Jobs: []wire.Job{}},
		"one":       {Jobs: []wire.Job{one}, Matched: 1, Total: 3},
		"with next": {Jobs: []wire.Job{one, two}, Next: "abc\"", Matched: 2, Total: 2},
	} {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		WriteJSON(want, http.StatusOK, l)
		writeJobList(got, l)
		if got.Body.String() != want.Body.String() {
			t.Errorf("%s: writeJobList wrote\n%s\nwriteJSON\n%s", name, got.Body, want.Body)
		}
		if got.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: content type %q", name, got.Header().Get("Content-Type"))
		}
	}
}

// An export shows a job an operator paused as paused, and leaves the
// replicated set, whose specs it shares, as it was: the job is not
// paused in its spec, and a resume shows it running again.
func TestWriteJobSet_LeavesTheSetAsItWas(t *testing.T) {
	specs := []jobs.Spec{{Name: "a", Schedules: []string{"@daily"}, Shell: "true"}, {Name: "b", Schedules: []string{"@daily"}, Shell: "true"}}
	set := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h", Count: 2}, Jobs: jobs.Addrs(specs), OperatorPaused: []string{"b"}}
	var b bytes.Buffer
	if err := writeJobSet(&b, set, false, nil); err != nil {
		t.Fatal(err)
	}
	var got wire.JobSet
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Jobs) != 2 || got.Jobs[0].Paused || !got.Jobs[1].Paused {
		t.Errorf("the export: %+v; want b paused, a not", got.Jobs)
	}
	if specs[0].Paused || specs[1].Paused {
		t.Errorf("the export paused the set's own specs: a %v, b %v", specs[0].Paused, specs[1].Paused)
	}
}

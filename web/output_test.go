package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// fakeOutputs answers for one running attempt on worker w1 and records
// what it was asked.
type fakeOutputs struct {
	mu    sync.Mutex
	asked []worker.OutputRequest
	down  bool
}

func (o *fakeOutputs) AttemptOutput(_ context.Context, workerID string, req worker.OutputRequest) (worker.LiveOutput, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.asked = append(o.asked, req)
	switch {
	case o.down:
		return worker.LiveOutput{}, errors.New("dial tcp 127.0.0.1:1: connection refused")
	case workerID != "w1" || req.Attempt != "talk@20260801T090000Z.1":
		return worker.LiveOutput{}, fmt.Errorf("attempt %s on %s: %w", req.Attempt, workerID, jobs.ErrNotFound)
	}
	text := "live <b>line</b> & more\n"
	return worker.LiveOutput{Attempt: req.Attempt, Node: workerID, Running: true,
		Stdout: worker.OutputChunk{Text: text[min(int(req.StdoutFrom), len(text)):], From: req.StdoutFrom, Next: int64(len(text))},
		Stderr: worker.OutputChunk{Text: "warming up\n", Next: 11}}, nil
}

// outputFixture adds a running attempt and a finished one whose stdout
// (not published) is markup.
func outputFixture(t *testing.T) (*fixture, *fakeOutputs) {
	outs := &fakeOutputs{}
	f := newFixture(t, func(s *Server) { s.Outputs = outs })
	f.state.mu.Lock()
	f.state.runs = append([]jobs.Run{
		{ID: "talk@20260801T090000Z", Job: "talk", ScheduledAt: t0, State: jobs.Running, Attempts: []jobs.Attempt{
			{ID: "talk@20260801T090000Z.1", Number: 1, Token: jobs.Fence{Epoch: 4, Seq: 20}, Worker: "w1", State: jobs.Running, GrantedAt: at(0), StartedAt: at(1)}}},
		{ID: "talk@20260801T085900Z", Job: "talk", ScheduledAt: at(-60), State: jobs.Succeeded, Attempts: []jobs.Attempt{
			{ID: "talk@20260801T085900Z.1", Number: 1, Token: jobs.Fence{Epoch: 4, Seq: 18}, Worker: "w2", State: jobs.Succeeded, GrantedAt: at(-60), StartedAt: at(-60), EndedAt: at(-59),
				ExitCode: intp(0), StdoutTail: "<script>alert(1)</script>\ntotal 42\n"}}},
	}, f.state.runs...)
	talk := jobs.Spec{Name: "talk", Schedules: []string{"@every 1m"}, Shell: "talk"}
	talk.Normalize()
	f.state.specs = append(f.state.specs, talk)
	f.state.mu.Unlock()
	return f, outs
}

// The attempt page shows a running attempt's output as its worker has it,
// and a finished one's from its record; the job page shows the finished
// stdout too. Output is text: markup in it is escaped, never run.
func TestServer_AttemptOutputPages(t *testing.T) {
	f, _ := outputFixture(t)
	code, _, body := f.get(t, "/attempts/talk@20260801T090000Z.1")
	if code != 200 || !strings.Contains(body, `live &lt;b&gt;line&lt;/b&gt; &amp; more`) || !strings.Contains(body, "warming up") ||
		!strings.Contains(body, `data-next="24"`) || !strings.Contains(body, "Live from w1") || strings.Contains(body, "<b>line</b>") {
		t.Errorf("running attempt page (%d):\n%s", code, body)
	}
	code, _, body = f.get(t, "/attempts/talk@20260801T085900Z.1")
	if code != 200 || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;\ntotal 42") || strings.Contains(body, "<script>alert") ||
		!strings.Contains(body, `data-final="true"`) {
		t.Errorf("finished attempt page (%d):\n%s", code, body)
	}
	code, _, body = f.get(t, "/jobs/talk")
	if code != 200 || !strings.Contains(body, `<summary>stdout tail</summary><pre class="stdout-tail">&lt;script&gt;alert(1)&lt;/script&gt;`) ||
		!strings.Contains(body, `href="/attempts/talk@20260801T085900Z.1"`) || strings.Contains(body, "<script>alert") {
		t.Errorf("job page (%d) lacks the escaped stdout tail or the attempt link:\n%s", code, body)
	}
	if code, _, body := f.get(t, "/attempts/talk@20260801T090000Z.7"); code != 404 {
		t.Errorf("no such attempt: %d %s", code, body)
	}
}

// GET /api/v1/attempts/{id}/output: from an offset, while it runs; the
// record's tails once it has ended; clear refusals.
func TestServer_AttemptOutputAPI(t *testing.T) {
	f, outs := outputFixture(t)
	var out worker.LiveOutput
	code, _, body := f.get(t, "/api/v1/attempts/talk@20260801T090000Z.1/output?stdout_from=5&stderr_from=0")
	if err := json.Unmarshal([]byte(body), &out); err != nil || code != 200 || out.Stdout.Text != "<b>line</b> & more\n" || !out.Running || out.Final {
		t.Errorf("running, from 5: %d %s", code, body)
	}
	outs.mu.Lock()
	if n := len(outs.asked); n == 0 || outs.asked[n-1].StdoutFrom != 5 {
		t.Errorf("the worker was asked %+v, want from offset 5", outs.asked)
	}
	outs.mu.Unlock()
	out = worker.LiveOutput{}
	code, _, body = f.get(t, "/api/v1/attempts/talk@20260801T085900Z.1/output")
	if err := json.Unmarshal([]byte(body), &out); err != nil || code != 200 || !out.Final || out.Running || out.Stdout.Text != "<script>alert(1)</script>\ntotal 42\n" {
		t.Errorf("finished: %d %s", code, body)
	}
	for path, want := range map[string]int{
		"/api/v1/attempts/talk@20260801T090000Z.1/output?stdout_from=-1": 400,
		"/api/v1/attempts/talk@20260801T090000Z.1/output?stderr_from=x":  400,
		"/api/v1/attempts/nosuch@20260801T090000Z.1/output":              404,
		"/api/v1/attempts/garbage/output":                                404,
	} {
		if code, _, body := f.get(t, path); code != want {
			t.Errorf("%s = %d %s, want %d", path, code, body, want)
		}
	}
	outs.mu.Lock()
	outs.down = true
	outs.mu.Unlock()
	if code, _, body := f.get(t, "/api/v1/attempts/talk@20260801T090000Z.1/output"); code != 503 || !strings.Contains(body, "its worker w1") {
		t.Errorf("worker unreachable: %d %s, want 503 naming the worker", code, body)
	}
}

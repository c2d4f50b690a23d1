package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencecron/fencecron/jobs"
)

// sse is one parsed server-sent event.
type sse struct {
	id, event, data string
}

// stream opens GET /api/v1/events as a browser's EventSource would and
// delivers its events on a channel, closed when the stream ends.
func stream(t *testing.T, base string, ctx context.Context, header ...string) (<-chan sse, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan sse, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var cur sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur != (sse{}) {
					ch <- cur
				}
				cur = sse{}
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.data = line[6:]
			case strings.HasPrefix(line, "retry: "):
				cur.event = "retry"
			}
		}
	}()
	return ch, resp
}

// next returns the next event that is not of the skipped kinds, failing
// after a bounded wait.
func next(t *testing.T, ch <-chan sse, skip ...string) sse {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatal("stream ended")
			}
			if !contains(skip, e.event) {
				return e
			}
		case <-deadline:
			t.Fatal("no event within 5s")
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestServer_EventStream(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch, resp := stream(t, f.http.URL+"/api/v1/events?after=9", ctx)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	if e := next(t, ch); e.event != "retry" {
		t.Errorf("first = %+v, want the retry hint", e)
	}
	c := next(t, ch)
	var sum struct {
		Leader  string   `json:"leader"`
		Epoch   uint64   `json:"epoch"`
		Members []string `json:"members"`
	}
	if c.event != "cluster" || json.Unmarshal([]byte(c.data), &sum) != nil || sum.Leader != "n2" || sum.Epoch != 4 || len(sum.Members) != 4 {
		t.Errorf("cluster event = %+v", c)
	}
	for _, want := range []string{"10", "11"} {
		if e := next(t, ch, "cluster"); e.event != "audit" || e.id != want {
			t.Errorf("got %+v, want audit %s", e, want)
		}
	}
	// A new entry in the replicated state arrives without asking.
	f.state.addEvent(jobs.Event{Time: at(60), Kind: jobs.EventGranted, Job: "report", Run: "report@x", Token: &jobs.Fence{Epoch: 4, Seq: 30}})
	e := next(t, ch, "cluster")
	var ev jobs.Event
	if e.id != "12" || json.Unmarshal([]byte(e.data), &ev) != nil || ev.Kind != jobs.EventGranted || ev.Token.Seq != 30 {
		t.Errorf("live event = %+v", e)
	}
	// The client leaves: its subscription ends.
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for f.state.subscribers() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("subscription not ended 5s after the client left")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A reconnecting EventSource resumes after Last-Event-ID.
	ch2, _ := stream(t, f.http.URL+"/api/v1/events?after=1", t.Context(), "Last-Event-ID", "11")
	if e := next(t, ch2, "cluster", "retry"); e.id != "12" {
		t.Errorf("resumed at %+v, want 12", e)
	}

	// Bad resume points are 400s.
	for _, h := range [][]string{{"Last-Event-ID", "x"}, {}} {
		path := "/api/v1/events"
		if len(h) == 0 {
			path += "?after=-1"
		}
		code, _, body := f.do(t, "GET", path, "", append([]string{"Accept", "text/event-stream"}, h...)...)
		if code != http.StatusBadRequest || !strings.Contains(body, "event sequence number") {
			t.Errorf("%v %s: %d %s", h, path, code, body)
		}
	}
}

// Close ends open event streams instead of waiting for them.
func TestServer_CloseEndsStreams(t *testing.T) {
	f := newFixture(t)
	srv := &Server{Addr: "127.0.0.1:0", Cluster: f.srv.Cluster, State: f.state, Scheduler: f.sched, Store: fakeStore{}, Logger: f.srv.Logger, TLS: testPeerID}
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	ch, _ := stream(t, srv.URL()+"/api/v1/events", t.Context())
	next(t, ch, "retry")
	if got := testutil.ToFloat64(srv.api.Metrics.EventStreams); got != 1 {
		t.Errorf("open streams = %v, want 1", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		t.Fatalf("Close: %v (an open stream held it)", err)
	}
	for range ch {
	}
}

// An audit entry goes out as one frame, byte for byte as clients have
// always parsed it: its id, its kind, its JSON as json.Marshal writes it
// (HTML and line separators escaped) on one data line, and a blank line.
func TestServer_EventStreamFrameBytes(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.http.URL+"/api/v1/events?after=11", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	f.state.addEvent(jobs.Event{Time: at(60), Kind: jobs.EventGranted, Job: "report", Run: "report@x",
		Token: &jobs.Fence{Epoch: 4, Seq: 30}, Detail: "<b>&\u2028\"quoted\""})
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte("event: audit\n")) || !bytes.HasSuffix(got, []byte("\n\n")) {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("stream ended before the audit frame (%v): %q", err, got)
		}
	}
	start := bytes.Index(got, []byte("id: 12\n"))
	if start < 0 {
		t.Fatalf("no frame for entry 12 in %q", got)
	}
	frame := got[start:]
	frame = frame[:bytes.Index(frame, []byte("\n\n"))+2]
	data, ok := bytes.CutPrefix(frame, []byte("id: 12\nevent: audit\ndata: "))
	if !ok {
		t.Fatalf("frame %q does not start with its id and kind", frame)
	}
	var ev jobs.Event
	if err := json.Unmarshal(bytes.TrimSuffix(data, []byte("\n\n")), &ev); err != nil {
		t.Fatalf("frame %q: %v", frame, err)
	}
	want, _ := json.Marshal(ev)
	if wantFrame := "id: 12\nevent: audit\ndata: " + string(want) + "\n\n"; string(frame) != wantFrame {
		t.Errorf("frame\n %q\nwant\n %q", frame, wantFrame)
	}
	if ev.Detail != "<b>&\u2028\"quoted\"" {
		t.Errorf("detail read back as %q", ev.Detail)
	}
}

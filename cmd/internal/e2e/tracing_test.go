package e2e

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// gotSpan is one span an OTLP receiver got, with the node that sent it.
type gotSpan struct {
	node string // service.instance.id
	*tracepb.Span
}

func (s gotSpan) attr(k string) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return anyValue(kv.Value)
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	}
	return fmt.Sprint(v)
}

func (s gotSpan) String() string {
	return fmt.Sprintf("%s on %s (span %x, parent %x)", s.Name, s.node, s.SpanId, s.ParentSpanId)
}

// otlpReceiver is an OTLP/HTTP trace receiver on loopback that decodes
// what it is sent, as a collector would.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []gotSpan
	bad   []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		o.bad = append(o.bad, fmt.Sprintf("%s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err))
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		node := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.instance.id" {
				node = anyValue(kv.Value)
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans = append(o.spans, gotSpan{node, s})
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// trace returns the spans of one trace, and what the receiver refused.
func (o *otlpReceiver) trace(id []byte) ([]gotSpan, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []gotSpan
	for _, s := range o.spans {
		if string(s.TraceId) == string(id) {
			out = append(out, s)
		}
	}
	return out, append([]string(nil), o.bad...)
}

// find returns the spans named name (on node, if not empty) that have
// the given attributes.
func findSpans(spans []gotSpan, name, node string, attrs map[string]string) []gotSpan {
	var out []gotSpan
	for _, s := range spans {
		if s.Name != name || (node != "" && s.node != node) {
			continue
		}
		ok := true
		for k, v := range attrs {
			ok = ok && s.attr(k) == v
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// With tracing on, the report handoff is one trace, exported over
// OTLP/HTTP to a receiver on loopback: the leader's fired, granted and
// dispatched spans, each worker's attempt with its establish, process,
// publish and completion, the store node's spans of those writes as their
// children, and the job's own `fencecron publish` span as the child of
// its process span, made from TRACEPARENT. The paused worker's publish,
// refused, is an error carrying both tokens; the takeover is a second
// attempt span in the same trace.
func TestTracing_ReportHandoffIsOneTrace(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	env := map[string][]string{}
	for _, name := range []string{"n1", "n2", "n3", "w1", "w2", "store"} {
		env[name] = []string{"OTEL_BSP_SCHEDULE_DELAY=200"} // export within a fifth of a second, not five
	}
	faults := "FENCECRON_FAULTS=stop-before-publish=1"
	env["w1"], env["w2"] = append(env["w1"], faults), append(env["w2"], faults)
	c := startCluster(t, localcluster.Options{
		Servers: 3, Workers: 2, StoreNode: true, Tags: workerTags, Env: env,
		Sections: fmt.Sprintf("telemetry: {otlp_endpoint: %q}\n", srv.URL),
		Jobs: `  - name: report
    schedule: "0 0 1 1 *"
    target: {role: worker}
    shell: 'echo "own,$FENCECRON_ATTEMPT" | "$FENCECRON_BIN" publish "reports/own-$FENCECRON_ATTEMPT.txt" && echo "report,$FENCECRON_NODE,$FENCECRON_ATTEMPT"'
    output: 'reports/{{ .Job }}.csv'
    lease_ttl: 2s
    retries: 1
    backoff: 1s
    timeout: 30s
`})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	waitAlive(t, leader, "w1", "w2")

	run := trigger(t, leader, "report")
	first := run.Attempts[0]
	w1 := c.Node(first.Worker)
	waitStopped(t, w1)
	run = waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
		if len(r.Attempts) < 2 || r.Attempts[1].State != jobs.Succeeded {
			return fmt.Errorf("no succeeded takeover attempt yet")
		}
		return nil
	})
	if err := w1.Resume(); err != nil {
		t.Fatal(err)
	}
	run = waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
		if r.Attempts[0].State != jobs.Fenced {
			return fmt.Errorf("attempt 1 is %s", r.Attempts[0].State)
		}
		return nil
	})
	second := run.Attempts[1]
	w2 := c.Node(second.Worker)
	tid := runtrace.TraceID(run.ID)

	// Every span of both attempts reaches the receiver, in the run's trace.
	var spans []gotSpan
	proctest.Eventually(t, 30*time.Second, "every span of the run in its trace", func() error {
		var bad []string
		spans, bad = recv.trace(tid[:])
		if len(bad) > 0 {
			return fmt.Errorf("the receiver refused exports: %v", bad)
		}
		var missing []string
		for _, want := range []struct{ name, node string }{
			{runtrace.SpanFired, leader.Name},
			{runtrace.SpanGranted, leader.Name}, {runtrace.SpanDispatched, leader.Name},
			{runtrace.SpanAttempt, w1.Name}, {runtrace.SpanAttempt, w2.Name},
			{runtrace.SpanEstablish, w1.Name}, {runtrace.SpanEstablish, w2.Name},
			{runtrace.SpanProcess, w1.Name}, {runtrace.SpanProcess, w2.Name},
			{runtrace.SpanPublish, w1.Name}, {runtrace.SpanPublish, w2.Name},
			{runtrace.SpanCompleted, w1.Name}, {runtrace.SpanCompleted, w2.Name},
			{"fencecron publish", w1.Name}, {"fencecron publish", w2.Name},
			{"store establish", "store"}, {"store publish", "store"},
		} {
			if len(findSpans(spans, want.name, want.node, nil)) == 0 {
				missing = append(missing, want.name+" on "+want.node)
			}
		}
		// The stale publish's spans end last (the store's, once it has
		// refused it): wait for them too, not only for some of each kind.
		if len(findSpans(spans, runtrace.SpanPublish, w1.Name, map[string]string{runtrace.AttrToken: first.Token.String()})) == 0 {
			missing = append(missing, "w1's stale publish")
		}
		if len(findSpans(spans, "store publish", "store", map[string]string{runtrace.AttrToken: first.Token.String(), runtrace.AttrKey: run.Output})) == 0 {
			missing = append(missing, "the store's span of w1's stale publish")
		}
		if len(missing) > 0 {
			return fmt.Errorf("trace %s of run %s lacks %s; it has %v", tid, run.ID, strings.Join(missing, ", "), spans)
		}
		return nil
	})
	t.Logf("trace %s of run %s: %d spans from %d nodes", tid, run.ID, len(spans), len(func() map[string]bool {
		m := map[string]bool{}
		for _, s := range spans {
			m[s.node] = true
		}
		return m
	}()))
	byID := map[string]gotSpan{}
	for _, s := range spans {
		byID[string(s.SpanId)] = s
	}
	parentOf := func(s gotSpan) (gotSpan, bool) { p, ok := byID[string(s.ParentSpanId)]; return p, ok }

	// The run's root: fired, with the span id derived from the run id.
	fired := findSpans(spans, runtrace.SpanFired, "", nil)
	root := runtrace.RootSpanID(run.ID)
	if len(fired) != 1 || len(fired[0].ParentSpanId) != 0 || string(fired[0].SpanId) != string(root[:]) {
		t.Errorf("fired spans %v: want one root with span id %s", fired, root)
	}
	// Each attempt: granted (with its token) on a leader, then a
	// dispatched span, then the worker's attempt span under it.
	for _, att := range []jobs.Attempt{first, second} {
		no := fmt.Sprint(att.Number)
		g := findSpans(spans, runtrace.SpanGranted, "", map[string]string{runtrace.AttrAttemptNo: no,
			runtrace.AttrEpoch: fmt.Sprint(att.Token.Epoch), runtrace.AttrSeq: fmt.Sprint(att.Token.Seq), runtrace.AttrLogIndex: fmt.Sprint(att.Token.Seq), runtrace.AttrAhead: "false"})
		if len(g) != 1 {
			t.Errorf("attempt %s: granted spans %v, want one with its token %s", att.ID, g, att.Token)
			continue
		}
		if p, ok := parentOf(g[0]); !ok || p.Name != runtrace.SpanFired {
			t.Errorf("attempt %s: granted span's parent is not fired", att.ID)
		}
		as := findSpans(spans, runtrace.SpanAttempt, att.Worker, map[string]string{runtrace.AttrAttemptNo: no, runtrace.AttrToken: att.Token.String()})
		if len(as) != 1 {
			t.Errorf("attempt %s: attempt spans on %s %v, want one", att.ID, att.Worker, as)
			continue
		}
		if d, ok := parentOf(as[0]); !ok || d.Name != runtrace.SpanDispatched {
			t.Errorf("attempt %s: its span's parent is not the leader's dispatched span", att.ID)
		} else if gp, ok := parentOf(d); !ok || string(gp.SpanId) != string(g[0].SpanId) {
			t.Errorf("attempt %s: dispatched is not under its granted span", att.ID)
		}
		// Under the attempt: establish, with the store's span under it;
		// the process, with the job's own publish under it and the
		// store's under that; the worker's publish; the completion.
		kids := map[string][]gotSpan{}
		for _, s := range spans {
			if p, ok := parentOf(s); ok && string(p.SpanId) == string(as[0].SpanId) {
				kids[s.Name] = append(kids[s.Name], s)
			}
		}
		for _, name := range []string{runtrace.SpanEstablish, runtrace.SpanProcess, runtrace.SpanPublish, runtrace.SpanCompleted} {
			if len(kids[name]) != 1 {
				t.Errorf("attempt %s: %d %s spans under it, want 1", att.ID, len(kids[name]), name)
			}
		}
		if len(kids[runtrace.SpanProcess]) == 1 {
			proc := kids[runtrace.SpanProcess][0]
			if proc.attr(runtrace.AttrExitCode) != "0" {
				t.Errorf("attempt %s: process span exit code %q, want 0", att.ID, proc.attr(runtrace.AttrExitCode))
			}
			var own []gotSpan
			for _, s := range findSpans(spans, "fencecron publish", att.Worker, map[string]string{runtrace.AttrAttempt: att.ID}) {
				if string(s.ParentSpanId) == string(proc.SpanId) {
					own = append(own, s)
				}
			}
			if len(own) != 1 || own[0].attr(runtrace.AttrOutcome) != "applied" || own[0].attr(runtrace.AttrToken) != att.Token.String() {
				t.Errorf("attempt %s: the job's own publish spans under its process %v, want one, applied, with token %s", att.ID, own, att.Token)
			} else if len(findSpans(spans, "store publish", "store", map[string]string{runtrace.AttrOutcome: "applied", runtrace.AttrKey: "reports/own-" + att.ID + ".txt"})) != 1 {
				t.Errorf("attempt %s: no store span of the job's own publish", att.ID)
			}
		}
		if es := kids[runtrace.SpanEstablish]; len(es) == 1 {
			var store []gotSpan
			for _, s := range findSpans(spans, "store establish", "store", nil) {
				if string(s.ParentSpanId) == string(es[0].SpanId) {
					store = append(store, s)
				}
			}
			if len(store) != 1 || store[0].attr(runtrace.AttrOutcome) != "established" && store[0].attr(runtrace.AttrOutcome) != "applied" {
				t.Errorf("attempt %s: store spans under its establish %v (outcome %q)", att.ID, store, func() string {
					if len(store) == 1 {
						return store[0].attr(runtrace.AttrOutcome)
					}
					return ""
				}())
			}
		}
	}

	// The paused worker's publish, refused: an error event with both
	// tokens, on the worker's span and on the store's.
	refused := append(findSpans(spans, runtrace.SpanPublish, w1.Name, map[string]string{runtrace.AttrToken: first.Token.String()}),
		findSpans(spans, "store publish", "store", map[string]string{runtrace.AttrToken: first.Token.String(), runtrace.AttrKey: run.Output})...)
	if len(refused) != 2 {
		t.Fatalf("spans of w1's stale publish: %v, want the worker's and the store's", refused)
	}
	for _, s := range refused {
		if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("%v: status %v, want an error", s, s.Status)
		}
		ev := false
		for _, e := range s.Events {
			got := gotSpan{Span: &tracepb.Span{Attributes: e.Attributes}}
			if e.Name == runtrace.EventRefused && got.attr(runtrace.AttrOutcome) == "stale_owner" &&
				got.attr(runtrace.AttrToken) == first.Token.String() && got.attr(runtrace.AttrGreatest) == second.Token.String() {
				ev = true
			}
		}
		if !ev {
			t.Errorf("%v: no %q event with stale_owner, token %s and greatest %s: %v", s, runtrace.EventRefused, first.Token, second.Token, s.Events)
		}
	}
	if ok := findSpans(spans, runtrace.SpanPublish, w2.Name, map[string]string{runtrace.AttrOutcome: "applied"}); len(ok) != 1 {
		t.Errorf("w2's publish spans %v, want one applied", ok)
	}

	// The log lines about the run name its trace: the leader's grant,
	// the worker's attempt (with its span), the store's refusal.
	for _, n := range []*localcluster.Node{leader, w2, c.Node("store")} {
		log, err := os.ReadFile(n.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "trace_id="+hex.EncodeToString(tid[:])) {
			t.Errorf("%s's log names no trace_id=%s", n.Name, tid)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
)

// Bad lateness flags are refused before anything is built or started.
func TestLateness_Flags(t *testing.T) {
	for args, want := range map[string]string{
		"-tracing sometimes":     `-tracing: "sometimes", want off, on or both`,
		"-process=false":         "-process=false without -http measures nothing",
		"-http -tracing=on -nah": "flag provided but not defined: -nah",
	} {
		var errOut bytes.Buffer
		err := run(t.Context(), append([]string{"lateness"}, strings.Fields(args)...), &bytes.Buffer{}, &errOut)
		if err == nil || !strings.Contains(err.Error()+errOut.String(), want) {
			t.Errorf("lateness %s: err %v (%s), want %q", args, err, errOut.String(), want)
		}
	}
	for v, want := range map[string][]bool{"off": {false}, "on": {true}, "both": {false, true}} {
		if got, err := tracingModes(v); err != nil || !slices.Equal(got, want) {
			t.Errorf("tracingModes(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
}

// Each binary is measured with tracing off before on, and process jobs
// before HTTP jobs, so that neighbours in the table met the same machine.
func TestLatenessVariants_Order(t *testing.T) {
	vs := latenessVariants([]string{"old", "new"}, []string{"compare (old)", "this (new)"}, kinds{process: true, http: true}, []bool{false, true})
	var got []string
	for _, v := range vs {
		got = append(got, strings.Join(strings.Split(strings.TrimSuffix(v.cells(), "\t"), "\t"), " "))
	}
	want := []string{
		"compare (old) process off", "compare (old) http off", "compare (old) process on", "compare (old) http on",
		"this (new) process off", "this (new) http off", "this (new) process on", "this (new) http on",
	}
	if !slices.Equal(got, want) {
		t.Errorf("variants\n%q\nwant\n%q", got, want)
	}
	if vs := latenessVariants([]string{"b"}, []string{"b"}, kinds{http: true}, []bool{false}); len(vs) != 1 || !vs[0].http {
		t.Errorf("-http -process=false: %+v, want one HTTP variant", vs)
	}
}

// The jobs a rate runs are a valid jobs section: processes, or GETs to
// the receiver, one per job, on its own path.
func TestRateJobs_Valid(t *testing.T) {
	recv, err := startReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer recv.close()
	for _, r := range []*receiver{nil, recv} {
		f, err := config.Parse("jobs.yaml", []byte("jobs:\n"+rateJobs(3, time.Second, time.Second, r)))
		if err != nil {
			t.Fatalf("jobs section: %v", err)
		}
		if len(f.Jobs) != 3 {
			t.Fatalf("%d jobs, want 3", len(f.Jobs))
		}
		j := f.Jobs[2]
		if r == nil && (j.HTTP != nil || !slices.Equal(j.Command, []string{"/bin/true"})) {
			t.Errorf("process job %+v, want /bin/true", j)
		}
		if r != nil && (j.HTTP == nil || j.HTTP.URL != recv.URL()+"/h002" || len(j.Command) != 0) {
			t.Errorf("HTTP job %+v, want a GET to %s/h002", j, recv.URL())
		}
	}
}

// The receiver times each run's first request from its scheduled time,
// as the request's own header gives it; a retried request does not move
// it, and a request without the fence headers counts as bad.
func TestReceiver_Lateness(t *testing.T) {
	recv, err := startReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer recv.close()
	now := time.Now().Truncate(time.Second)
	send := func(id string, scheduled time.Time) int {
		req, err := http.NewRequest("GET", recv.URL()+"/h000", nil)
		if err != nil {
			t.Fatal(err)
		}
		if id != "" {
			req.Header.Set(jobs.HTTPRunIDHeader, id)
			req.Header.Set(jobs.HTTPScheduledHeader, scheduled.UTC().Format(time.RFC3339))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := send("h000@a", now); st != 200 {
		t.Errorf("status %d, want 200", st)
	}
	first := recv.lateness(now, now.Add(time.Second))
	send("h000@a", now) // a retry
	send("h000@b", now.Add(-time.Hour))
	if st := send("", now); st != http.StatusBadRequest {
		t.Errorf("a request without the fence headers: status %d, want 400", st)
	}
	got := recv.lateness(now, now.Add(time.Second))
	if len(first) != 1 || !slices.Equal(got, first) || got[0] < 0 || got[0] > time.Minute {
		t.Errorf("lateness %v then %v: want one run, unmoved by its retry, after its scheduled time", first, got)
	}
	if conns, bad := recv.counts(); conns != 1 || bad != 1 {
		t.Errorf("%d connections, %d bad requests; want 1 kept alive and 1 bad", conns, bad)
	}
	http.DefaultClient.CloseIdleConnections()
}

// The trace sink decodes what the SDK's OTLP/HTTP exporter sends and
// counts its spans.
func TestTraceSink_CountsExportedSpans(t *testing.T) {
	sink, err := startTraceSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.close()
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(sink.URL()+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := tp.Tracer("test")
	for range 3 {
		_, s := tr.Start(context.Background(), "run")
		s.End()
	}
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if spans, bad := sink.counts(); spans != 3 || bad != 0 {
		t.Errorf("sink counted %d spans, %d bad exports; want 3 and none", spans, bad)
	}
}

// HTTP jobs on a traced cluster, end to end: every request of the window
// arrives, over connections kept between runs, and the nodes export
// their spans to the sink.
func TestLateness_SmokeHTTPTraced(t *testing.T) {
	var out, errOut bytes.Buffer
	keep := t.TempDir()
	defer logsOnFailure(t, keep)
	err := run(t.Context(), []string{"lateness", "-http", "-process=false", "-tracing", "on", "-rates", "5", "-duration", "3s", "-warmup", "2s", "-bare", "0", "-bin", proctest.Binary(t), "-keep", keep}, &out, &errOut)
	if err != nil {
		t.Fatalf("lateness: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(out.String(), "\n")
	// binary, jobs, tracing, fires/s, runs started, p50, ms, p99, ms,
	// max, ms, runs/s, % succeeded, entries/run, % delivered.
	if len(lines) < 2 {
		t.Fatalf("output:\n%s", out.String())
	}
	f := strings.Fields(lines[1])
	if len(f) != 15 || f[1] != "http" || f[2] != "on" || f[3] != "5" || f[4] != "15" || f[14] != "100.0%" {
		t.Errorf("row %q: want HTTP jobs, traced, 15 of 15 delivered:\n%s", f, out.String())
	}
	// ..., elections, receiver connections/run, spans exported/run.
	var res []string
	for i, l := range lines {
		if strings.Contains(l, "anonymous RSS") && i+1 < len(lines) {
			res = strings.Fields(lines[i+1])
		}
	}
	if len(res) < 2 {
		t.Fatalf("no resources row:\n%s", out.String())
	}
	conns, err1 := strconv.ParseFloat(res[len(res)-2], 64)
	spans, err2 := strconv.ParseFloat(res[len(res)-1], 64)
	if err1 != nil || err2 != nil || conns >= 1 || spans <= 0 {
		t.Errorf("receiver connections/run %v, spans/run %v: want fewer connections than runs, and spans:\n%s", conns, spans, out.String())
	}
}

// The stage table gives the starts again by the node that ran each, the
// leader named, so a confirmation that reaches the followers late shows.
func TestPrintTrace_StartsByNode(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	r := rateResult{rate: 100, leader: "n1", startedOn: map[string][]time.Duration{"n2": ms(20, 22, 24), "n1": ms(10, 12, 14)},
		traces: []runTrace{{"started": 12 * time.Millisecond}}}
	var out bytes.Buffer
	if err := printTrace(&out, []rateResult{r}, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	want := [][]string{{"100", "started", "on", "n1", "(leader)", "3", "12"}, {"100", "started", "on", "n2", "3", "22"}}
	found := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 2 && f[1] == "started" && f[2] == "on" {
			if found >= len(want) || !slices.Equal(f[:len(want[found])], want[found]) {
				t.Fatalf("row %q; want it to begin %v\n%s", l, want[min(found, len(want)-1)], out.String())
			}
			found++
		}
	}
	if found != len(want) {
		t.Fatalf("%d rows of starts by node, want %d:\n%s", found, len(want), out.String())
	}
}

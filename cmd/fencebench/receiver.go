package main

import (
	"compress/gzip"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"github.com/fencecron/fencecron/jobs"
)

// receiver is the target of the HTTP jobs lateness measures: a server on
// loopback that answers 200 at once and keeps, per run, when its first
// request arrived and the scheduled time its Fencecron-Scheduled-At
// header gave. It runs in the harness, so its clock is the nodes'.
type receiver struct {
	loopbackServer

	mu      sync.Mutex
	arrived map[string]arrival // by Fencecron-Run-Id
	conns   int                // connections accepted
	bad     int                // requests without the fence headers
}

// arrival is when one run's request reached the receiver.
type arrival struct{ scheduled, at time.Time }

// startReceiver listens on a free loopback port and serves until close.
func startReceiver() (*receiver, error) {
	r := &receiver{arrived: map[string]arrival{}}
	err := r.start(&http.Server{Handler: r, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			r.mu.Lock()
			r.conns++
			r.mu.Unlock()
		}
	}})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	io.Copy(io.Discard, req.Body)
	id := req.Header.Get(jobs.HTTPRunIDHeader)
	scheduled, err := time.Parse(time.RFC3339, req.Header.Get(jobs.HTTPScheduledHeader))
	r.mu.Lock()
	defer r.mu.Unlock()
	if id == "" || err != nil {
		r.bad++
		http.Error(w, "no fence headers", http.StatusBadRequest)
		return
	}
	if _, dup := r.arrived[id]; !dup {
		r.arrived[id] = arrival{scheduled: scheduled, at: at}
	}
}

// lateness returns, for every run scheduled in [since, until) whose
// request arrived, its arrival after its scheduled time.
func (r *receiver) lateness(since, until time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, a := range r.arrived {
		if !a.scheduled.Before(since) && a.scheduled.Before(until) {
			out = append(out, a.at.Sub(a.scheduled))
		}
	}
	return out
}

// counts returns the connections accepted and the bad requests so far.
func (r *receiver) counts() (conns, bad int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns, r.bad
}

// traceSink is the OTLP/HTTP endpoint the measured nodes export to with
// -tracing: it decodes each export, as a collector would, counts its
// spans and drops them.
type traceSink struct {
	loopbackServer

	mu    sync.Mutex
	spans int
	bad   int
}

// startTraceSink listens on a free loopback port and serves until close.
func startTraceSink() (*traceSink, error) {
	s := &traceSink{}
	if err := s.start(&http.Server{Handler: s}); err != nil {
		return nil, err
	}
	return s, nil
}

// maxExport bounds one export's body.
const maxExport = 64 << 20

func (s *traceSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, err := decodeExport(r)
	s.mu.Lock()
	if err != nil {
		s.bad++
	} else {
		s.spans += n
	}
	s.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// decodeExport decodes one OTLP/HTTP trace export and counts its spans.
func decodeExport(r *http.Request) (int, error) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		return 0, errors.New("not an OTLP/HTTP protobuf trace export")
	}
	var body io.Reader = io.LimitReader(r.Body, maxExport)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return 0, err
		}
		body = io.LimitReader(zr, maxExport)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return 0, err
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return 0, err
	}
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	return n, nil
}

// counts returns the spans received and the exports refused so far.
func (s *traceSink) counts() (spans, bad int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spans, s.bad
}

// loopbackServer is an HTTP server of the harness on a free loopback
// port (the receiver's, the trace sink's), serving until close.
type loopbackServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// start listens and serves srv in the background.
func (l *loopbackServer) start(srv *http.Server) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv.ReadHeaderTimeout = 10 * time.Second
	l.srv, l.ln, l.done = srv, ln, make(chan struct{})
	go func() {
		defer close(l.done)
		srv.Serve(ln)
	}()
	return nil
}

// URL is the server's base URL (for the trace sink, an otlp_endpoint).
func (l *loopbackServer) URL() string { return "http://" + l.ln.Addr().String() }

// close stops the server and waits for it.
func (l *loopbackServer) close() {
	l.srv.Close()
	<-l.done
}

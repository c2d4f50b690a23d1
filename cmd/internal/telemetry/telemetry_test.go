package telemetry_test

import (
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/telemetry"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// got is what a receiver got: the spans' names, the node they came
// from, and the header the config asked for.
type got struct {
	mu     sync.Mutex
	names  []string
	node   string
	header string
}

func (g *got) add(req *coltracepb.ExportTraceServiceRequest, header string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.header = header
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.instance.id" {
				g.node = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				g.names = append(g.names, s.Name)
			}
		}
	}
}

type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	g *got
}

func (r grpcReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.g.add(req, firstOf(md.Get("x-key")))
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// export opens tracing with cfg, grants one run's attempt and flushes.
func export(t *testing.T, cfg config.Telemetry) {
	t.Helper()
	tp, err := telemetry.Open(context.Background(), cfg, "n1")
	if err != nil || tp == nil {
		t.Fatalf("Open = %v, %v; want a provider", tp, err)
	}
	run := jobs.Run{ID: "report@20260701T090000Z", Job: "report"}
	runtrace.New(tp).Granted(run, jobs.Attempt{ID: run.ID + ".1", Number: 1}, run.ScheduledAt).End(nil)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The telemetry section reaches a real OTLP receiver over both
// protocols, with its headers, as node n1.
func TestOpen_ExportsOverGRPCAndHTTP(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	want := func(t *testing.T, g *got) {
		t.Helper()
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.names) != 3 || g.node != "n1" || g.header != "k1" {
			t.Errorf("received spans %v from %q with x-key %q; want fired, granted and dispatched from n1 with k1", g.names, g.node, g.header)
		}
	}
	t.Run("grpc", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := &got{}
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, grpcReceiver{g: g})
		go srv.Serve(lis)
		defer srv.Stop()
		export(t, config.Telemetry{OTLPEndpoint: "http://" + lis.Addr().String(), Protocol: config.ProtocolGRPC, SampleRatio: 1, Headers: map[string]string{"x-key": "k1"}})
		want(t, g)
	})
	t.Run("http/protobuf", func(t *testing.T) {
		g := &got{}
		srv := httptest.NewServer(httpReceiver(g))
		defer srv.Close()
		export(t, config.Telemetry{OTLPEndpoint: srv.URL + "/base", SampleRatio: 1, Headers: map[string]string{"x-key": "k1"}})
		want(t, g)
	})
	t.Run("https with ca_file", func(t *testing.T) {
		g := &got{}
		srv := httptest.NewTLSServer(httpReceiver(g))
		defer srv.Close()
		ca := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		export(t, config.Telemetry{OTLPEndpoint: srv.URL + "/base", CAFile: ca, SampleRatio: 1, Headers: map[string]string{"x-key": "k1"}})
		want(t, g)
	})
}

// httpReceiver is an OTLP/HTTP receiver under /base.
func httpReceiver(g *got) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/base/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad export to "+r.URL.Path, http.StatusBadRequest)
			return
		}
		g.add(&req, r.Header.Get("x-key"))
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
}

// Off unless an endpoint is set, in the file or the environment.
func TestOpen_OffUnlessAnEndpointIsSet(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if tp, err := telemetry.Open(context.Background(), config.Telemetry{SampleRatio: 1}, "n1"); tp != nil || err != nil {
		t.Errorf("Open without an endpoint = %v, %v; want off", tp, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	if !telemetry.Enabled(config.Telemetry{}) {
		t.Error("OTEL_EXPORTER_OTLP_ENDPOINT does not turn tracing on")
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if telemetry.Enabled(config.Telemetry{OTLPEndpoint: "http://127.0.0.1:4318"}) {
		t.Error("OTEL_SDK_DISABLED=true does not turn tracing off")
	}
}

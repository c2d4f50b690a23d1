// Package telemetry starts a node's (or `fencecron publish`'s) trace
// export over OTLP from the telemetry: section and the SDK's OTEL_*
// environment. It is the one place that knows the OpenTelemetry SDK and
// its exporters; everything else speaks the trace API (scheduler/runtrace,
// fencedstore/httpstore).
package telemetry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/credentials"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// Enabled reports whether cfg or the environment asks for traces: an
// endpoint in the telemetry section or in OTEL_EXPORTER_OTLP_ENDPOINT
// (or its _TRACES_ form), and OTEL_SDK_DISABLED not true.
func Enabled(cfg config.Telemetry) bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return cfg.OTLPEndpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Open starts exporting traces as cfg and the environment say, as
// service.name fencecron and service.instance.id instance. It returns
// nil, nil when tracing is off. Shut the provider down to flush it.
func Open(ctx context.Context, cfg config.Telemetry, instance string) (*sdktrace.TracerProvider, error) {
	if !Enabled(cfg) {
		return nil, nil
	}
	exp, err := exporter(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(),
		resource.WithAttributes(attribute.String("service.name", "fencecron"), attribute.String("service.instance.id", instance)))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, batchOptions()...),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(runtrace.Sampler(cfg.SampleRatio)),
		sdktrace.WithIDGenerator(runtrace.IDGenerator{}),
	), nil
}

// Export batches and the queue that holds spans until they go: four
// times the SDK's defaults. A leader at 1,000 runs a second ends 3,000
// spans a second, in bursts as it grants batches of runs (a worker ends
// its runs' spans in the burst after their fire time); in batches of 512
// it exports six times a second, each export a request of its own. In batches of 2,048 a run's
// spans, made and sent, cost about a fifth less CPU
// (BenchmarkBatch_RunSpans). The queue holds nearly three seconds of
// them at that rate; a span that finds it full is dropped, never waited
// for, so nothing that ends a span waits on the exporter.
const (
	exportBatch = 2048
	exportQueue = 4 * exportBatch
)

// batchOptions are the batch span processor's options: ours, where the
// SDK's OTEL_BSP_* environment does not set its own.
func batchOptions() []sdktrace.BatchSpanProcessorOption {
	var opts []sdktrace.BatchSpanProcessorOption
	if os.Getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") == "" {
		opts = append(opts, sdktrace.WithMaxExportBatchSize(exportBatch))
	}
	if os.Getenv("OTEL_BSP_MAX_QUEUE_SIZE") == "" {
		opts = append(opts, sdktrace.WithMaxQueueSize(exportQueue))
	}
	return opts
}

// exporter is the OTLP exporter of the configured protocol.
func exporter(ctx context.Context, cfg config.Telemetry) (sdktrace.SpanExporter, error) {
	var tlsConf *tls.Config
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", cfg.CAFile)
		}
		tlsConf = clustertls.TelemetryClientConfig(pool)
	}
	protocol := cfg.Protocol
	if protocol == "" {
		protocol = firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case config.ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if cfg.OTLPEndpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.OTLPEndpoint))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if tlsConf != nil {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tlsConf)))
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	case "", config.ProtocolHTTPProtobuf:
		var opts []otlptracehttp.Option
		if cfg.OTLPEndpoint != "" {
			// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT: traces go to
			// /v1/traces under it.
			u, err := url.Parse(cfg.OTLPEndpoint)
			if err != nil {
				return nil, fmt.Errorf("otlp_endpoint: %w", err)
			}
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		if tlsConf != nil {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsConf))
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	return nil, fmt.Errorf("OTLP protocol %q: want %s or %s", protocol, config.ProtocolGRPC, config.ProtocolHTTPProtobuf)
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

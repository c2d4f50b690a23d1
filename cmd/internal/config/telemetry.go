package config

import (
	"fmt"
	"net/url"
)

// OTLP protocols (telemetry.protocol), as OTEL_EXPORTER_OTLP_PROTOCOL
// names them.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
	DefaultSampleRatio   = 1.0
)

// Telemetry is the telemetry section: where this node exports the
// traces of runs, over OTLP. Tracing is off unless otlp_endpoint (or the
// SDK's OTEL_EXPORTER_OTLP_ENDPOINT) is set; the other OTEL_* variables
// work as the OpenTelemetry SDK defines them, this section winning where
// it says something.
type Telemetry struct {
	// OTLPEndpoint is the collector's base URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT: http://host:4318 for http/protobuf
	// (traces go to /v1/traces under it), http://host:4317 for grpc.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Protocol is grpc or http/protobuf (the default).
	Protocol string `yaml:"protocol"`
	// Insecure sends without TLS even to an https:// endpoint's port.
	Insecure bool `yaml:"insecure"`
	// CAFile is a PEM file of the CAs the collector is verified with,
	// instead of the system's.
	CAFile string `yaml:"ca_file"`
	// SampleRatio is the share of runs traced, 0 to 1 (default 1). The
	// choice is made from the run's trace id, so every node makes the
	// same one for a run.
	SampleRatio float64 `yaml:"sample_ratio"`
	// Headers are sent with every export (a backend's API key: write it
	// as ${NAME}).
	Headers map[string]string `yaml:"headers"`
}

func (d *decoder) checkTelemetry(t *Telemetry) {
	if e := t.OTLPEndpoint; e != "" && !d.failed["telemetry.otlp_endpoint"] {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.errorf(d.at("telemetry.otlp_endpoint"), "telemetry.otlp_endpoint", "%q: want a URL such as http://127.0.0.1:4318", clip(e, 60))
		}
	}
	switch t.Protocol {
	case "", ProtocolGRPC, ProtocolHTTPProtobuf:
	default:
		if !d.failed["telemetry.protocol"] {
			d.errorf(d.at("telemetry.protocol"), "telemetry.protocol", "%q: want %s or %s", clip(t.Protocol, 40), ProtocolGRPC, ProtocolHTTPProtobuf)
		}
	}
	if r := t.SampleRatio; (r < 0 || r > 1) && !d.failed["telemetry.sample_ratio"] {
		d.errorf(d.at("telemetry.sample_ratio"), "telemetry.sample_ratio", "%s: want 0 to 1", fmt.Sprint(r))
	}
}

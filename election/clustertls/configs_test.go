package clustertls_test

import (
	"crypto/tls"
	"testing"

	"github.com/fencecron/fencecron/election/clustertls"
)

// Every configuration sets its floor: TLS 1.3 where both ends are ours,
// TLS 1.2 where the other end is a browser or someone else's server.
func TestConfigs_Floors(t *testing.T) {
	id := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretA})
	trust, err := clustertls.TrustConfig(id.CAPEM())
	if err != nil {
		t.Fatal(err)
	}
	port := clustertls.PortServerConfig(id.LinkServerConfig(), nil)
	for name, tc := range map[string]struct {
		cfg  *tls.Config
		want uint16
	}{
		"raft server":   {id.RaftServerConfig(), tls.VersionTLS13},
		"raft client":   {id.RaftClientConfig("n2"), tls.VersionTLS13},
		"link server":   {id.LinkServerConfig(), tls.VersionTLS13},
		"link client":   {id.LinkClientConfig(""), tls.VersionTLS13},
		"link http2":    {id.HTTP2ClientConfig(""), tls.VersionTLS13},
		"job's store":   {trust, tls.VersionTLS13},
		"port":          {port, tls.VersionTLS12},
		"public API":    {clustertls.PublicServerConfig(tls.Certificate{}), tls.VersionTLS12},
		"HTTP job":      {clustertls.HTTPJobClientConfig(nil), tls.VersionTLS12},
		"notification":  {clustertls.NotifyClientConfig("smtp.example.com", nil), tls.VersionTLS12},
		"trace export":  {clustertls.TelemetryClientConfig(nil), tls.VersionTLS12},
		"CLI":           {clustertls.CLIClientConfig(nil), tls.VersionTLS12},
		"CLI -insecure": {clustertls.CLIInsecureClientConfig(), tls.VersionTLS12},
	} {
		if got := tc.cfg.MinVersion; got != tc.want {
			t.Errorf("%s: MinVersion %#x, want %#x", name, got, tc.want)
		}
	}
}

// The HTTP port presents the cluster's certificate to whoever offers
// ProtoHTTP (nodes, jobs), api.tls's to anyone else, and the cluster's to
// everyone when there is no api.tls.
func TestPortServerConfig_ChoosesByALPN(t *testing.T) {
	id := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretA})
	cluster, public := id.LinkServerConfig(), clustertls.PublicServerConfig(tls.Certificate{})
	for _, tc := range []struct {
		name   string
		public *tls.Config
		protos []string
		want   *tls.Config
	}{
		{"a node", public, id.LinkClientConfig("").NextProtos, cluster},
		{"a browser", public, []string{"h2", "http/1.1"}, public},
		{"a browser, no api.tls", nil, []string{"h2", "http/1.1"}, cluster},
	} {
		got, err := clustertls.PortServerConfig(cluster, tc.public).GetConfigForClient(&tls.ClientHelloInfo{SupportedProtos: tc.protos})
		if err != nil || got != tc.want {
			t.Errorf("%s: got %p (%v), want %p", tc.name, got, err, tc.want)
		}
	}
}

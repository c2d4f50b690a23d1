package clustertls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Every tls.Config a fencecron process uses is built in this file, named
// for its use, so that protocol versions, ALPN and verification are
// chosen in one place and a new use cannot quietly differ.

// Protocol floors. Links between nodes, and a job's process to the store,
// have ours at both ends: TLS 1.3 only. The public API, HTTP jobs, email
// and the command line meet browsers and other people's servers: TLS 1.2,
// which some of them still need, and nothing older.
const (
	linkMinVersion   = tls.VersionTLS13
	publicMinVersion = tls.VersionTLS12
)

// ServerConfig is the configuration of a listener for proto. With
// requireClient, a peer must present a certificate of this cluster (Raft);
// without it, one is verified if given (the HTTP port, where a job's
// process proves itself with its signed fence token instead, and a
// request's TLS state says whether it came from a node: see IsPeer).
// RaftServerConfig and LinkServerConfig name its two uses.
func (id *Identity) ServerConfig(proto string, requireClient bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if requireClient {
		auth = tls.RequireAndVerifyClientCert
	}
	cfg := &tls.Config{
		MinVersion:   linkMinVersion,
		Certificates: []tls.Certificate{id.cert},
		ClientAuth:   auth,
		ClientCAs:    id.roots,
		NextProtos:   negotiable(proto),
		Time:         id.now,
	}
	if proto == ProtoRaft {
		// A client that names no protocol is not a node dialling Raft.
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if cs.NegotiatedProtocol != ProtoRaft {
				return fmt.Errorf("the client does not speak %s", ProtoRaft)
			}
			return nil
		}
	}
	return cfg
}

// ClientConfig is the configuration of a connection to another node for
// proto. If peer is not "", the server's certificate must name it; else any
// certificate of this cluster will do (the peer's name is not known, as
// when dialing the store by its URL). RaftClientConfig and
// LinkClientConfig name its two uses.
func (id *Identity) ClientConfig(proto, peer string) *tls.Config {
	return &tls.Config{
		MinVersion:   linkMinVersion,
		Certificates: []tls.Certificate{id.cert},
		NextProtos:   offered(proto),
		// The chain and the name are checked below, against the cluster's
		// CAs and node name rather than a host name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if !slices.Contains(negotiable(proto), cs.NegotiatedProtocol) {
				return fmt.Errorf("the peer does not speak %s", proto)
			}
			var raw [][]byte
			for _, c := range cs.PeerCertificates {
				raw = append(raw, c.Raw)
			}
			return id.verify(raw, x509.ExtKeyUsageServerAuth, peer)
		},
		Time: id.now,
	}
}

// RaftServerConfig is the Raft listener's: only a node of this cluster,
// proving it with its certificate and asking for Raft, gets past the
// handshake.
func (id *Identity) RaftServerConfig() *tls.Config { return id.ServerConfig(ProtoRaft, true) }

// RaftClientConfig is a Raft connection's to peer, whose certificate must
// name it.
func (id *Identity) RaftClientConfig(peer string) *tls.Config {
	return id.ClientConfig(ProtoRaft, peer)
}

// LinkServerConfig is the cluster side of a node's HTTP port (the
// internal API and the store as nodes and jobs reach it): the cluster's
// certificate, a client certificate verified if given.
func (id *Identity) LinkServerConfig() *tls.Config { return id.ServerConfig(ProtoHTTP, false) }

// LinkClientConfig is an HTTP/1.1 client's of another node's HTTP port:
// peer's certificate, or ("") any node's of this cluster.
func (id *Identity) LinkClientConfig(peer string) *tls.Config {
	return id.ClientConfig(ProtoHTTP, peer)
}

// HTTP2ClientConfig is LinkClientConfig(peer) offering HTTP/2 as well,
// for an http.Transport that speaks it (ForceAttemptHTTP2): a transport
// that does not would read HTTP/2 frames as HTTP/1.1.
func (id *Identity) HTTP2ClientConfig(peer string) *tls.Config {
	cfg := id.ClientConfig(ProtoHTTP, peer)
	cfg.NextProtos = []string{ProtoHTTP, protoHTTP2, "http/1.1"}
	return cfg
}

// HTTP2Health is the HTTP/2 setting of a transport to other nodes. Every
// call to a peer shares one connection, so a connection that went dead
// without a FIN (a partition, a host that vanished) would hold every later
// call until TCP gives up, minutes on: ping a connection silent for two
// seconds, and drop it if the ping is not answered in five. Not sooner: a
// saturated peer answers late, and dropping its connection fails every
// call on it and costs a new handshake just when it can least afford one.
func HTTP2Health() *http.HTTP2Config {
	return &http.HTTP2Config{SendPingTimeout: 2 * time.Second, PingTimeout: 5 * time.Second}
}

// TrustConfig is the client configuration of a process that holds no
// certificate, only the cluster's CA PEM (a job publishing to the store):
// it verifies that the server is a node of the cluster.
func TrustConfig(caPEM []byte) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM certificate in the cluster CA")
	}
	id := &Identity{roots: roots, now: time.Now}
	return &tls.Config{
		MinVersion:         linkMinVersion,
		NextProtos:         offered(ProtoHTTP),
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			var raw [][]byte
			for _, c := range cs.PeerCertificates {
				raw = append(raw, c.Raw)
			}
			return id.verify(raw, x509.ExtKeyUsageServerAuth, "")
		},
	}, nil
}

// PortServerConfig is a node's HTTP port's, which serves nodes, jobs and
// people on one port: a client offering ProtoHTTP (a node, or a job's
// process) gets cluster (LinkServerConfig); any other (a browser, the
// command line) gets public (PublicServerConfig), or cluster when there
// is no public certificate. The one chosen decides the handshake,
// versions included.
func PortServerConfig(cluster, public *tls.Config) *tls.Config {
	return &tls.Config{
		MinVersion: publicMinVersion,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if public != nil && !slices.Contains(hello.SupportedProtos, ProtoHTTP) {
				return public, nil
			}
			return cluster, nil
		},
	}
}

// PublicServerConfig is the public API's (api.tls), presenting cert to
// browsers and API clients. HTTP/1.1 only: the dashboard's event stream
// and the API's clients need nothing more.
func PublicServerConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   publicMinVersion,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
	}
}

// HTTPJobClientConfig is an HTTP job's requests': the server verified by
// roots, a job's ca_file (nil: the system's roots).
func HTTPJobClientConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{MinVersion: publicMinVersion, RootCAs: roots}
}

// TelemetryClientConfig is the trace export's to an OTLP collector
// (telemetry.ca_file): the collector verified by roots. Someone else's
// server: TLS 1.2 and up.
func TelemetryClientConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{MinVersion: publicMinVersion, RootCAs: roots}
}

// NotifyClientConfig is an email notification's STARTTLS to the SMTP
// server host, verified by roots (nil: the system's roots). Webhooks and
// Slack go through the notifier's HTTP client and need none.
func NotifyClientConfig(host string, roots *x509.CertPool) *tls.Config {
	return &tls.Config{MinVersion: publicMinVersion, ServerName: host, RootCAs: roots}
}

// CLIClientConfig is the command line's to a node's public API over
// https: the node verified by roots, from -ca (nil: the system's roots).
func CLIClientConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{MinVersion: publicMinVersion, RootCAs: roots}
}

// CLIInsecureClientConfig is the command line's with -insecure: the
// node's certificate is not verified. Only for a call that sends nothing
// and reads only a status (`fencecron health` over loopback, where the
// certificate names the node's public host).
func CLIInsecureClientConfig() *tls.Config {
	return &tls.Config{MinVersion: publicMinVersion, InsecureSkipVerify: true}
}

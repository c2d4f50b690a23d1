package web

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/election/clustertls/clustertlstest"
)

// testPeerID is the cluster identity of the node under test, and
// stubID that of the nodes that call it.
var testPeerID, stubID = clustertlstest.Identity("w1", clustertlstest.Secret), clustertlstest.Identity("stub", clustertlstest.Secret)

// openServer starts a real Server (listener and all) over the fixture's
// fakes.
func openServer(t *testing.T, opts ...func(*Server)) (*Server, *fixture) {
	t.Helper()
	f := newFixture(t)
	srv := &Server{Addr: "127.0.0.1:0", Cluster: f.srv.Cluster, State: f.state, Scheduler: f.sched, Internal: f.srv.Internal, Store: fakeStore{}, Logger: f.srv.Logger, TLS: testPeerID}
	for _, o := range opts {
		o(srv)
	}
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(t.Context()) })
	return srv, f
}

func clientWith(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func call(t *testing.T, c *http.Client, method, url string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{"job":"report"}`))
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestServer_OnePortPlainAndClusterTLS(t *testing.T) {
	srv, f := openServer(t)
	addr := strings.TrimPrefix(srv.URL(), "http://")
	jobCfg, err := clustertls.TrustConfig(testPeerID.CAPEM())
	if err != nil {
		t.Fatal(err)
	}
	node := clientWith(stubID.ClientConfig(clustertls.ProtoHTTP, "w1"))
	job := clientWith(jobCfg)
	plain := clientWith(nil)

	for _, tc := range []struct {
		name   string
		c      *http.Client
		method string
		url    string
		code   int
		msg    string
	}{
		{"plain read", plain, "GET", "http://" + addr + "/api/v1/status", 200, `"node"`},
		{"a node reads over TLS", node, "GET", "https://" + addr + "/api/v1/status", 200, `"node"`},
		{"a job reads over TLS", job, "GET", "https://" + addr + "/api/v1/status", 200, `"node"`},
		{"a node calls the internal API", node, "POST", "https://" + addr + "/internal/v1/trigger", 200, `"report@manual"`},
		{"a job may not", job, "POST", "https://" + addr + "/internal/v1/trigger", 401, "nodes of this cluster"},
		{"nor plain HTTP", plain, "POST", "http://" + addr + "/internal/v1/trigger", 401, "nodes of this cluster"},
	} {
		code, body, err := call(t, tc.c, tc.method, tc.url)
		if err != nil || code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: %d %v %s; want %d with %q", tc.name, code, err, body, tc.code, tc.msg)
		}
	}
	if got := strings.Join(f.sched.Calls(), ","); got != "trigger report" {
		t.Errorf("the scheduler saw %q; want one trigger, from the node", got)
	}

	stranger := clustertlstest.Identity("w1", []byte("another-cluster-secret-0123456789abcdef"))
	if _, _, err := call(t, clientWith(stranger.ClientConfig(clustertls.ProtoHTTP, "")), "GET", "https://"+addr+"/api/v1/status"); err == nil {
		t.Error("a node of another cluster completed a handshake")
	}
	otherJob, _ := clustertls.TrustConfig(stranger.CAPEM())
	if _, _, err := call(t, clientWith(otherJob), "GET", "https://"+addr+"/api/v1/status"); err == nil {
		t.Error("a job trusting another cluster's CA accepted this node")
	}
	// Raft's protocol is not served here.
	if _, err := tls.Dial("tcp", addr, stubID.ClientConfig(clustertls.ProtoRaft, "")); err == nil {
		t.Error("the HTTP port completed a Raft handshake")
	}
}

func TestServer_StoreWritesCrossTheNetworkOnlyOverTLS(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		method, path string
		remote       string
		tls          bool
		code         int
	}{
		{"PUT", "/api/v1/store/reports/x.csv", "10.0.0.9:40000", false, 403},
		{"PUT", "/api/v1/store/reports/x.csv", "127.0.0.1:40000", false, 0},
		{"PUT", "/api/v1/store/reports/x.csv", "10.0.0.9:40000", true, 0},
		// A node raising a job's floor sends the store credential.
		{"POST", "/api/v1/floor", "10.0.0.9:40000", false, 403},
		{"POST", "/api/v1/floor", "10.0.0.9:40000", true, 0},
	} {
		r := httptest.NewRequest(tc.method, tc.path, strings.NewReader("body"))
		r.RemoteAddr, r.Host = tc.remote, "10.0.0.1:8080"
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		w := httptest.NewRecorder()
		f.srv.Handler().ServeHTTP(w, r)
		refused := strings.Contains(w.Body.String(), "must come over TLS")
		if refused != (tc.code == 403) {
			t.Errorf("%s %s from %s (tls %v): %d %s", tc.method, tc.path, tc.remote, tc.tls, w.Code, w.Body)
		}
	}
}

// selfSigned returns a certificate for the public side, as an operator's
// CA would issue, and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "dashboard"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func TestServer_PublicTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	srv, _ := openServer(t, func(s *Server) {
		s.PublicTLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	})
	if !strings.HasPrefix(srv.URL(), "https://") {
		t.Fatalf("URL %s with api.tls", srv.URL())
	}
	addr := strings.TrimPrefix(srv.URL(), "https://")
	browser := clientWith(&tls.Config{RootCAs: pool})
	if code, body, err := call(t, browser, "GET", "https://"+addr+"/api/v1/status"); err != nil || code != 200 {
		t.Errorf("a browser over HTTPS: %d %v %s", code, err, body)
	}
	// Plain HTTP is sent to HTTPS.
	resp, err := clientWith(nil).Get("http://" + addr + "/jobs?x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusPermanentRedirect || loc != "https://"+addr+"/jobs?x=1" {
		t.Errorf("plain GET: %d to %q", resp.StatusCode, loc)
	}
	// Nodes still get the cluster certificate on the same port.
	if code, _, err := call(t, clientWith(stubID.ClientConfig(clustertls.ProtoHTTP, "w1")), "POST", "https://"+addr+"/internal/v1/trigger"); err != nil || code != 200 {
		t.Errorf("a node on a port with api.tls: %d %v", code, err)
	}
}

// failingListener fails its first n Accepts as a process out of file
// descriptors would.
type failingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of descriptors for a moment does not stop the port for
// good: once accepting works again, requests are served.
func TestMuxListener_SurvivesFailedAccepts(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: raw}
	fl.n.Store(3)
	f := newFixture(t)
	mux := newMuxListener(fl, f.srv.Logger, time.Second, testPeerID.ServerConfig(clustertls.ProtoHTTP, false), nil)
	srv := &http.Server{Handler: f.srv.Handler(), ReadHeaderTimeout: time.Second}
	go srv.Serve(mux)
	defer srv.Close()
	code, body, err := call(t, clientWith(nil), "GET", "http://"+raw.Addr().String()+"/healthz")
	if err != nil || code != 200 {
		t.Fatalf("after three failed accepts: %d %v %s", code, err, body)
	}
}

// Nodes speak HTTP/2 to each other's HTTP port, so a worker with hundreds
// of calls in flight to the leader holds one connection, not one (and a
// TLS handshake) per call, and stays under the per-client cap. Clients
// that do not offer it (a job's, an older node's) keep HTTP/1.1.
func TestServer_NodesShareOneHTTP2Connection(t *testing.T) {
	srv, _ := openServer(t)
	url := "https://" + strings.TrimPrefix(srv.URL(), "http://") + "/api/v1/status"
	node := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: stubID.HTTP2ClientConfig("w1"), ForceAttemptHTTP2: true}}
	var mu sync.Mutex
	conns := map[string]bool{}
	get := func(c *http.Client) (string, error) {
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			mu.Lock()
			conns[info.Conn.LocalAddr().String()] = true
			mu.Unlock()
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", url, nil)
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("status %d", resp.StatusCode)
		}
		return resp.Proto, nil
	}
	if proto, err := get(node); err != nil || proto != "HTTP/2.0" {
		t.Fatalf("a node's first call: %q, %v; want HTTP/2.0", proto, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			if _, err := get(node); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(conns) != 1 {
		t.Errorf("51 calls of one node, 50 at once, used %d connections; want 1", len(conns))
	}

	jobCfg, err := clustertls.TrustConfig(testPeerID.CAPEM())
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*tls.Config{
		"a job's client":          jobCfg,
		"an HTTP/1.1 node client": stubID.ClientConfig(clustertls.ProtoHTTP, "w1"),
	} {
		if proto, err := get(clientWith(cfg)); err != nil || proto != "HTTP/1.1" {
			t.Errorf("%s: %q, %v; want HTTP/1.1", name, proto, err)
		}
	}
}

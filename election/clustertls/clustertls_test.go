package clustertls_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
)

var (
	secretA = []byte("first-cluster-secret-0123456789-abcdefgh")
	secretB = []byte("second-cluster-secret-9876543210-ijklmnop")
)

func mustLoad(t testing.TB, c clustertls.Config) *clustertls.Identity {
	t.Helper()
	id, err := clustertls.Load(c)
	if err != nil {
		t.Fatalf("Load(%s): %v", c.NodeName, err)
	}
	return id
}

// handshake connects client to server over loopback and returns
// each side's error and the server's view of the connection.
func handshake(t *testing.T, client, server *tls.Config) (clientErr, serverErr error, st tls.ConnectionState) {
	t.Helper()
	// Real sockets, not net.Pipe: a side that fails sends an alert, and a
	// pipe would block that write until the other side reads.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	defer c2.Close()
	deadline := time.Now().Add(5 * time.Second)
	c1.SetDeadline(deadline)
	c2.SetDeadline(deadline)
	srv := tls.Server(c2, server)
	done := make(chan error, 1)
	go func() {
		err := srv.Handshake()
		if err != nil {
			c2.Close() // the client must not wait for a reply that will not come
		}
		done <- err
	}()
	cli := tls.Client(c1, client)
	clientErr = cli.Handshake()
	if clientErr != nil {
		c1.Close()
	}
	serverErr = <-done
	// In TLS 1.3 the client finishes before the server has checked its
	// certificate; a read makes the client see the server's verdict.
	if clientErr == nil && serverErr != nil {
		c1.SetDeadline(time.Now().Add(time.Second))
		_, clientErr = cli.Read(make([]byte, 1))
	}
	return clientErr, serverErr, srv.ConnectionState()
}

func TestIdentity_SameSecretConnects(t *testing.T) {
	n1 := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretA, Hosts: []string{"127.0.0.1"}})
	n2 := mustLoad(t, clustertls.Config{NodeName: "n2", Secret: secretA})
	for _, requireClient := range []bool{true, false} {
		cerr, serr, st := handshake(t, n1.ClientConfig(clustertls.ProtoRaft, "n2"), n2.ServerConfig(clustertls.ProtoRaft, requireClient))
		if cerr != nil || serr != nil {
			t.Fatalf("requireClient=%v: client %v, server %v", requireClient, cerr, serr)
		}
		if len(st.PeerCertificates) == 0 || !clustertls.Names(st.PeerCertificates[0], "n1") {
			t.Errorf("server sees peer %+v, want n1", st.PeerCertificates)
		}
	}
	if !bytes.Equal(n1.CAPEM(), n2.CAPEM()) {
		t.Error("two nodes with one secret derived different CA certificates")
	}
}

func TestIdentity_OtherSecretRefused(t *testing.T) {
	n1 := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretA})
	stranger := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretB})
	// A stranger dialing a node: the node refuses its certificate.
	_, serr, _ := handshake(t, stranger.ClientConfig(clustertls.ProtoRaft, ""), n1.ServerConfig(clustertls.ProtoRaft, true))
	if serr == nil {
		t.Error("a node accepted a client certificate from another cluster")
	}
	// A node dialing a stranger: the node refuses the server's certificate.
	cerr, _, _ := handshake(t, n1.ClientConfig(clustertls.ProtoRaft, ""), stranger.ServerConfig(clustertls.ProtoRaft, true))
	if cerr == nil || !strings.Contains(cerr.Error(), "not issued by this cluster's CA") {
		t.Errorf("a node trusted a server of another cluster: %v", cerr)
	}
	// No certificate at all.
	_, serr, _ = handshake(t, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{clustertls.ProtoRaft}}, n1.ServerConfig(clustertls.ProtoRaft, true))
	if serr == nil {
		t.Error("the Raft listener accepted a client without a certificate")
	}
	// A node's certificate, but no protocol named.
	noALPN := n1.ClientConfig(clustertls.ProtoRaft, "")
	noALPN.NextProtos, noALPN.VerifyConnection = nil, nil
	if _, serr, _ = handshake(t, noALPN, n1.ServerConfig(clustertls.ProtoRaft, true)); serr == nil {
		t.Error("the Raft listener accepted a client that names no protocol")
	}
}

func TestIdentity_WrongNodeNameRefused(t *testing.T) {
	n1 := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretA})
	n2 := mustLoad(t, clustertls.Config{NodeName: "n2", Secret: secretA})
	cerr, _, _ := handshake(t, n1.ClientConfig(clustertls.ProtoHTTP, "n3"), n2.ServerConfig(clustertls.ProtoHTTP, false))
	if cerr == nil || !strings.Contains(cerr.Error(), `not node "n3"`) {
		t.Errorf("dialing n3 and reaching n2: %v, want a name mismatch", cerr)
	}
}

func TestIdentity_ProtocolsDoNotMix(t *testing.T) {
	n1 := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretA})
	cerr, serr, _ := handshake(t, n1.ClientConfig(clustertls.ProtoHTTP, ""), n1.ServerConfig(clustertls.ProtoRaft, true))
	if cerr == nil && serr == nil {
		t.Error("an HTTP client completed a handshake with the Raft listener")
	}
}

// TestIdentity_SecretRoll checks each pair of nodes a roll goes through:
// old only, new with the old as previous, new only.
func TestIdentity_SecretRoll(t *testing.T) {
	oldOnly := mustLoad(t, clustertls.Config{NodeName: "old", Secret: secretA})
	rolling := mustLoad(t, clustertls.Config{NodeName: "rolling", Secret: secretB, PreviousSecret: secretA})
	newOnly := mustLoad(t, clustertls.Config{NodeName: "new", Secret: secretB})
	ids := map[string]*clustertls.Identity{"old": oldOnly, "rolling": rolling, "new": newOnly}
	for _, tc := range []struct {
		a, b string
		ok   bool
	}{
		{"old", "rolling", true}, {"rolling", "old", true},
		{"new", "rolling", true}, {"rolling", "new", true},
		{"rolling", "rolling", true},
		{"old", "new", false}, {"new", "old", false},
	} {
		cerr, serr, _ := handshake(t, ids[tc.a].ClientConfig(clustertls.ProtoRaft, tc.b), ids[tc.b].ServerConfig(clustertls.ProtoRaft, true))
		if ok := cerr == nil && serr == nil; ok != tc.ok {
			t.Errorf("%s -> %s: client %v, server %v; want ok=%v", tc.a, tc.b, cerr, serr, tc.ok)
		}
	}
}

func TestTrustConfig_JobVerifiesTheStore(t *testing.T) {
	n1 := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretA})
	cfg, err := clustertls.TrustConfig(n1.CAPEM())
	if err != nil {
		t.Fatal(err)
	}
	cerr, serr, st := handshake(t, cfg, n1.ServerConfig(clustertls.ProtoHTTP, false))
	if cerr != nil || serr != nil {
		t.Fatalf("client %v, server %v", cerr, serr)
	}
	if clustertls.IsPeer(&st) {
		t.Error("a job's process, which has no certificate, counts as a node")
	}
	other := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretB})
	if cerr, _, _ := handshake(t, cfg, other.ServerConfig(clustertls.ProtoHTTP, false)); cerr == nil {
		t.Error("a job trusted a store of another cluster")
	}
}

func TestIdentity_NodeSeesPeer(t *testing.T) {
	n1 := mustLoad(t, clustertls.Config{NodeName: "n1", Secret: secretA})
	n2 := mustLoad(t, clustertls.Config{NodeName: "n2", Secret: secretA})
	_, _, st := handshake(t, n1.ClientConfig(clustertls.ProtoHTTP, "n2"), n2.ServerConfig(clustertls.ProtoHTTP, false))
	if !clustertls.IsPeer(&st) {
		t.Error("a node's request does not count as a node's")
	}
}

// ownCA is an operator's PKI made in the test.
type ownCA struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	dir  string
}

func newOwnCA(t *testing.T) *ownCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ops CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &ownCA{key: key, cert: cert, dir: t.TempDir()}
	writePEM(t, filepath.Join(ca.dir, "ca.pem"), "CERTIFICATE", der)
	return ca
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes a certificate for name and returns the config that loads it.
func (ca *ownCA) issue(t *testing.T, node, certName string) clustertls.Config {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: certName},
		DNSNames:  []string{certName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	cert, keyPath := filepath.Join(ca.dir, node+"-"+certName+".pem"), filepath.Join(ca.dir, node+"-"+certName+".key")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, keyPath, "PRIVATE KEY", kd)
	return clustertls.Config{NodeName: node, CAFile: filepath.Join(ca.dir, "ca.pem"), CertFile: cert, KeyFile: keyPath}
}

func TestLoad_OperatorPKI(t *testing.T) {
	ca := newOwnCA(t)
	n1 := mustLoad(t, ca.issue(t, "n1", "n1"))
	n2 := mustLoad(t, ca.issue(t, "n2", "n2"))
	if cerr, serr, _ := handshake(t, n1.ClientConfig(clustertls.ProtoRaft, "n2"), n2.ServerConfig(clustertls.ProtoRaft, true)); cerr != nil || serr != nil {
		t.Fatalf("client %v, server %v", cerr, serr)
	}
	if _, err := clustertls.Load(ca.issue(t, "n3", "web-frontend")); err == nil || !strings.Contains(err.Error(), `not node "n3"`) {
		t.Errorf("a certificate for another name loaded as n3's: %v", err)
	}
	derived := mustLoad(t, clustertls.Config{NodeName: "n2", Secret: secretA})
	if _, serr, _ := handshake(t, derived.ClientConfig(clustertls.ProtoRaft, ""), n1.ServerConfig(clustertls.ProtoRaft, true)); serr == nil {
		t.Error("a node with the operator's PKI accepted a certificate it did not issue")
	}
	bad := ca.issue(t, "n1", "n1")
	bad.KeyFile = ""
	if _, err := clustertls.Load(bad); err == nil {
		t.Error("cert_file without key_file loaded")
	}
}

// Rolling an operator's CA: with both CAs in ca_file, a node whose
// certificate the new CA issued and one whose the old CA did accept each
// other; a node that trusts only the old CA refuses the new certificate.
func TestLoad_OperatorCARoll(t *testing.T) {
	oldCA, newCA := newOwnCA(t), newOwnCA(t)
	bundle := filepath.Join(t.TempDir(), "both.pem")
	a, _ := os.ReadFile(filepath.Join(oldCA.dir, "ca.pem"))
	b, _ := os.ReadFile(filepath.Join(newCA.dir, "ca.pem"))
	if err := os.WriteFile(bundle, append(a, b...), 0o600); err != nil {
		t.Fatal(err)
	}
	onOld, onNew, oldOnly := oldCA.issue(t, "n1", "n1"), newCA.issue(t, "n2", "n2"), oldCA.issue(t, "n3", "n3")
	onOld.CAFile, onNew.CAFile = bundle, bundle
	n1, n2, n3 := mustLoad(t, onOld), mustLoad(t, onNew), mustLoad(t, oldOnly)
	for _, tc := range []struct {
		from, to *clustertls.Identity
		name     string
		ok       bool
	}{
		{n1, n2, "n2", true}, {n2, n1, "n1", true},
		{n3, n1, "n1", true}, {n3, n2, "n2", false},
	} {
		cerr, serr, _ := handshake(t, tc.from.ClientConfig(clustertls.ProtoRaft, tc.name), tc.to.ServerConfig(clustertls.ProtoRaft, true))
		if ok := cerr == nil && serr == nil; ok != tc.ok {
			t.Errorf("%s -> %s: client %v, server %v; want ok=%v", tc.from.Name(), tc.name, cerr, serr, tc.ok)
		}
	}
}

// Package clustertls is the identity every node proves on every link to
// another node: Raft, the internal API, and the store API as nodes and job
// processes use it across hosts. Links are TLS 1.3, mutually authenticated
// where both ends are nodes.
//
// By default the whole PKI comes from the cluster secret, so there is
// nothing but the secret to distribute: every node derives the same CA key
// from it (the keyring's HKDF, then Ed25519, which is deterministic), issues itself a
// fresh leaf certificate for its node name at start, and trusts exactly the
// certificates that CA signed. A peer that does not hold the secret cannot
// finish a handshake, so it gets nothing past it: no RPC is decoded, no
// term seen, no leader learned. Operators with their own PKI give a CA
// bundle, a certificate and its key instead (cluster.tls).
//
// Rolling to a new secret: with a previous secret, a node trusts the CAs of
// both and presents, next to its leaf, the new CA cross-signed by the old
// one, so a node that still has only the old secret verifies it too. No
// link ever needs both ends to switch at once.
//
// It also builds every other tls.Config of fencecron (configs.go): the
// public API's, an HTTP job's, email's, the command line's, each named for
// its use, so that versions and verification are chosen in one place.
package clustertls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fencecron/fencecron/fencedstore/keyring"
)

// ALPN protocol names. A connection says which service it wants inside the
// handshake, so a Raft connection can never be mistaken for an API call.
// Raft negotiates ProtoRaft. A node's HTTP client offers ProtoHTTP and
// then HTTP itself: the first tells the HTTP port to present the cluster's
// certificate (not api.tls's), and the second is what is negotiated,
// because net/http serves HTTP only under its own names (h2, http/1.1).
const (
	ProtoRaft = "fencecron-raft/1"
	ProtoHTTP = "fencecron/1"
)

// protoHTTP2 is HTTP/2's ALPN name. Nodes speak it to each other's HTTP
// port (HTTP2ClientConfig): one connection per peer carries every call in
// flight, where HTTP/1.1 needs a connection, and so a TLS handshake, per
// concurrent call. At hundreds of runs a second the handshakes cost both
// ends more CPU than the calls, and a worker's calls to the leader exceed
// the port's per-client connection cap.
const protoHTTP2 = "h2"

// offered is what a client of proto offers in ALPN.
func offered(proto string) []string {
	if proto == ProtoHTTP {
		return []string{ProtoHTTP, "http/1.1"}
	}
	return []string{proto}
}

// negotiable is what a connection for proto may end up speaking.
func negotiable(proto string) []string {
	if proto == ProtoHTTP {
		return []string{protoHTTP2, "http/1.1"}
	}
	return []string{proto}
}

// Config says where a node's identity comes from.
type Config struct {
	// NodeName is the name the node's certificate must carry.
	NodeName string
	// Secret derives the cluster CA unless CertFile is set; PreviousSecret,
	// during a roll, derives a second CA that is trusted too.
	Secret, PreviousSecret []byte
	// CAFile, CertFile and KeyFile are an operator's own PKI: a PEM bundle
	// of the CAs to trust (two during a roll), and this node's certificate
	// (with its intermediates) and key. The certificate must name NodeName.
	CAFile, CertFile, KeyFile string
	// Hosts are the IP addresses and DNS names a derived leaf is valid for
	// besides NodeName (the advertise and bind addresses), so a job's own
	// HTTP client can verify the store by the address it dials.
	Hosts []string
	// Now is the clock certificates are issued and checked by.
	Now func() time.Time
}

// Identity is a node's certificate and the CAs it trusts. It is safe for
// concurrent use.
type Identity struct {
	name  string
	roots *x509.CertPool
	cert  tls.Certificate
	caPEM []byte
	now   func() time.Time
	// Derived reports whether the PKI comes from the cluster secret.
	derived bool
}

// Load builds the node's identity: derived from the secret, or read from
// the operator's files.
func Load(c Config) (*Identity, error) {
	if c.NodeName == "" {
		return nil, errors.New("cluster TLS: the node name is required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" {
		return loadFiles(c)
	}
	return derive(c)
}

// derived CA validity: fixed, so every node derives the same certificate.
var (
	caNotBefore = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	caNotAfter  = time.Date(2199, 12, 31, 0, 0, 0, 0, time.UTC)
)

// leafLifetime is how long a derived leaf is valid; a node issues itself a
// new one at every start.
const leafLifetime = 5 * 365 * 24 * time.Hour

// authority is a CA derived from one secret.
type authority struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
	tmpl *x509.Certificate
}

// Fingerprint names a secret without revealing it: nodes tell each other
// which secrets they hold (see election) by these.
func Fingerprint(secret []byte) string {
	return hex.EncodeToString(keyring.Derive(secret, keyring.Fingerprint))
}

func newAuthority(secret []byte) (*authority, error) {
	if len(secret) == 0 {
		return nil, errors.New("cluster TLS: no cluster secret to derive the CA from")
	}
	key := ed25519.NewKeyFromSeed(keyring.Derive(secret, keyring.ClusterCAKey))
	serial := new(big.Int).SetBytes(keyring.Derive(secret, keyring.ClusterCASerial))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "fencecron cluster CA " + Fingerprint(secret), Organization: []string{"fencecron"}},
		NotBefore:             caNotBefore,
		NotAfter:              caNotAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// One intermediate below it: the cross-signed CA of a roll.
		MaxPathLen: 1,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: derive the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{key: key, cert: cert, tmpl: tmpl}, nil
}

// crossSign returns a's CA certificate signed by parent: the link that
// lets a node trusting only parent verify certificates a issued.
func (a *authority) crossSign(parent *authority) (*x509.Certificate, error) {
	t := *a.tmpl
	t.MaxPathLen, t.MaxPathLenZero = 0, true
	t.SubjectKeyId = a.cert.SubjectKeyId
	der, err := x509.CreateCertificate(rand.Reader, &t, parent.cert, a.key.Public(), parent.key)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: cross-sign the new CA: %w", err)
	}
	return x509.ParseCertificate(der)
}

func derive(c Config) (*Identity, error) {
	ca, err := newAuthority(c.Secret)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	caPEM := pemOf(ca.cert.Raw)
	var chain [][]byte
	if len(c.PreviousSecret) > 0 {
		prev, err := newAuthority(c.PreviousSecret)
		if err != nil {
			return nil, err
		}
		cross, err := ca.crossSign(prev)
		if err != nil {
			return nil, err
		}
		roots.AddCert(prev.cert)
		caPEM = append(caPEM, pemOf(prev.cert.Raw)...)
		chain = append(chain, cross.Raw)
	}

	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	now := c.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: c.NodeName, Organization: []string{"fencecron"}},
		NotBefore:    now.Add(-time.Hour), // tolerate peers whose clocks are a little behind
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{c.NodeName},
	}
	for _, h := range c.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !ip.IsUnspecified() && !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if h != "" && !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, leafKey.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: issue the node certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Identity{
		name:    c.NodeName,
		roots:   roots,
		cert:    tls.Certificate{Certificate: append([][]byte{der}, chain...), PrivateKey: leafKey, Leaf: leaf},
		caPEM:   caPEM,
		now:     c.Now,
		derived: true,
	}, nil
}

func loadFiles(c Config) (*Identity, error) {
	if c.CAFile == "" || c.CertFile == "" || c.KeyFile == "" {
		return nil, errors.New("cluster.tls: ca_file, cert_file and key_file go together")
	}
	caPEM, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("cluster.tls.ca_file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("cluster.tls.ca_file %s: no PEM certificate in it", c.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster.tls: %w", err)
	}
	id := &Identity{name: c.NodeName, roots: roots, cert: cert, caPEM: caPEM, now: c.Now}
	if err := id.verify(cert.Certificate, x509.ExtKeyUsageServerAuth, c.NodeName); err != nil {
		return nil, fmt.Errorf("cluster.tls.cert_file %s: %w", c.CertFile, err)
	}
	if err := id.verify(cert.Certificate, x509.ExtKeyUsageClientAuth, ""); err != nil {
		return nil, fmt.Errorf("cluster.tls.cert_file %s: it must also be usable as a client certificate (extended key usage clientAuth): %w", c.CertFile, err)
	}
	return id, nil
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// Name returns the node name the identity was issued for.
func (id *Identity) Name() string { return id.name }

// CAPEM returns the PEM of the CAs this node trusts: what a job's process
// needs to verify the store it publishes to (FENCECRON_STORE_CA). It holds
// no secret.
func (id *Identity) CAPEM() []byte { return bytes.Clone(id.caPEM) }

// Derived reports whether the PKI is derived from the cluster secret.
func (id *Identity) Derived() bool { return id.derived }

// verify checks a presented chain against the trusted CAs for usage, and,
// unless want is "", that its leaf names want.
func (id *Identity) verify(rawCerts [][]byte, usage x509.ExtKeyUsage, want string) error {
	if len(rawCerts) == 0 {
		return errors.New("no certificate presented")
	}
	certs := make([]*x509.Certificate, len(rawCerts))
	for i, raw := range rawCerts {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return fmt.Errorf("bad certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots: id.roots, Intermediates: inter, CurrentTime: id.now(),
		KeyUsages: []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return fmt.Errorf("not issued by this cluster's CA: %w", err)
	}
	if want != "" && !Names(certs[0], want) {
		return fmt.Errorf("the certificate is for %s, not node %q", describeNames(certs[0]), want)
	}
	return nil
}

// Names reports whether cert is issued to node name: one of its DNS names
// equals name (ignoring case), or, for a certificate without DNS names
// only, its common name does.
func Names(cert *x509.Certificate, name string) bool {
	for _, n := range cert.DNSNames {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return len(cert.DNSNames) == 0 && strings.EqualFold(cert.Subject.CommonName, name)
}

func describeNames(c *x509.Certificate) string {
	names := slices.Clone(c.DNSNames)
	if c.Subject.CommonName != "" && !slices.Contains(names, c.Subject.CommonName) {
		names = append(names, c.Subject.CommonName)
	}
	if len(names) == 0 {
		return "no name"
	}
	return strings.Join(names, ", ")
}

// IsPeer reports whether a connection's other end proved it is a node of
// this cluster: it presented a certificate that was verified against the
// cluster's CAs.
func IsPeer(cs *tls.ConnectionState) bool {
	return cs != nil && len(cs.VerifiedChains) > 0
}

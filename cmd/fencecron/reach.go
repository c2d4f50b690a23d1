package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/election/clustertls"
)

// defaultAddr is where a command looks for a node, and where `dev` and
// `demo` listen, unless a flag says otherwise: FENCECRON_ADDR, else the
// default node address. One variable moves all of them, so a user who
// runs dev on another port sets it once and every command follows.
func defaultAddr() string {
	if v := os.Getenv("FENCECRON_ADDR"); v != "" {
		return v
	}
	return config.DefaultAddr
}

// defaultListenAddr is defaultAddr as a host:port to listen on (a plain
// http:// address loses its scheme; an https:// one, which dev does not
// serve, gives way to the default).
func defaultListenAddr() string {
	a := defaultAddr()
	if rest, ok := strings.CutPrefix(a, "http://"); ok {
		return strings.TrimRight(rest, "/")
	}
	if strings.Contains(a, "://") {
		return config.DefaultAddr
	}
	return a
}

// tlsFlags are the flags, and their environment variables, by which every
// command that talks to a node trusts its certificate: one set for all of
// them, so what works for `status` works for `get`.
type tlsFlags struct {
	ca       string
	insecure bool
}

// addTLSFlags registers -ca and -insecure on fs, defaulting to
// FENCECRON_CA and FENCECRON_INSECURE.
func addTLSFlags(fs *flag.FlagSet) *tlsFlags {
	f := &tlsFlags{}
	insecure, _ := strconv.ParseBool(os.Getenv("FENCECRON_INSECURE"))
	fs.StringVar(&f.ca, "ca", "", "PEM file of the CA that signed the node's certificate, for an https:// address (or FENCECRON_CA; default: the system's roots)")
	fs.BoolVar(&f.insecure, "insecure", insecure, "with an https:// address, do not verify the node's certificate (or FENCECRON_INSECURE=true): only on a network you trust, such as loopback to a node whose certificate names its public host")
	return f
}

// caFile is the CA file -ca names, else FENCECRON_CA's.
func (f *tlsFlags) caFile() string {
	if f.ca != "" {
		return f.ca
	}
	return os.Getenv("FENCECRON_CA")
}

// config is the TLS client configuration the flags ask for, or nil for
// the default (the system's roots).
func (f *tlsFlags) config() (*tls.Config, error) {
	ca := f.caFile()
	switch {
	case f.insecure:
		return clustertls.CLIInsecureClientConfig(), nil
	case ca != "":
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("-ca (or FENCECRON_CA): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca (or FENCECRON_CA) %s: no PEM certificate in it", ca)
		}
		return clustertls.CLIClientConfig(pool), nil
	}
	return nil, nil
}

// warnInsecure says, once, what -insecure costs when a credential goes
// over the connection it does not check.
func (f *tlsFlags) warnInsecure(w io.Writer, base, what string) {
	if f.insecure && strings.HasPrefix(base, "https://") {
		fmt.Fprintf(w, "fencecron: warning: -insecure: %s goes to %s without checking its certificate; give its CA with -ca FILE or FENCECRON_CA instead\n", what, base)
	}
}

// reach names where a command sends its requests and how the user moves
// it, so that a failure to get there says what to change.
type reach struct {
	addr string // host:port
	flag string // -addr, -store
	env  string // FENCECRON_ADDR, FENCECRON_STORE
}

// reachError is a failure to reach a node, told as what to do next. It
// wraps the transport's error.
type reachError struct {
	msg string
	err error
}

func (e *reachError) Error() string { return e.msg }
func (e *reachError) Unwrap() error { return e.err }

// explain turns a transport failure into the next step, or returns err
// unchanged when it knows none.
func (r reach) explain(err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		record    tls.RecordHeaderError
		dns       *net.DNSError
		msg       string
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("no fencecron node answers at %s: is one running? set %s or %s", r.addr, r.flag, r.env)
	case errors.As(err, &unknownCA):
		msg = fmt.Sprintf("%s's certificate is signed by an authority this command does not trust (%v): give that CA's PEM file with -ca FILE or FENCECRON_CA", r.addr, unknownCA)
	case errors.As(err, &hostname):
		msg = fmt.Sprintf("%s's certificate is not for this address (%v): set %s (or %s) to a name or IP address it lists", r.addr, hostname, r.flag, r.env)
	case errors.As(err, &record) && strings.Contains(err.Error(), "does not look like a TLS handshake"):
		msg = fmt.Sprintf("%s answers plain HTTP, not HTTPS: use http:// in %s (or %s)", r.addr, r.flag, r.env)
	case errors.As(err, &dns):
		msg = fmt.Sprintf("cannot find the host of %s (%v): check %s or %s", r.addr, dns, r.flag, r.env)
	default:
		return err
	}
	return &reachError{msg: msg, err: err}
}

// explainingTransport is an http.RoundTripper whose failures to reach the
// node say what to do next, whatever wraps them later (the store client
// keeps only their text).
type explainingTransport struct {
	base http.RoundTripper
	to   reach
}

func (t explainingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		to := t.to
		to.addr = req.URL.Host // the leader's, when a command was sent on to it
		return nil, to.explain(err)
	}
	return resp, nil
}

// transport is the round tripper of a command that talks to r with the
// TLS flags f; tune adjusts the transport before it is wrapped.
func (f *tlsFlags) transport(r reach, tune func(*http.Transport)) (http.RoundTripper, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg != nil {
		tr.TLSClientConfig = cfg
	}
	if tune != nil {
		tune(tr)
	}
	return explainingTransport{base: tr, to: r}, nil
}

// reachErr is the reachError in err's chain, if any: what a command
// prints instead of the layers of context around it.
func reachErr(err error) error {
	var re *reachError
	if errors.As(err, &re) {
		return re
	}
	return err
}

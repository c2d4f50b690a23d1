package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"
)

// HTTPRequest is one request of an HTTP job.
type HTTPRequest struct {
	Method, URL string
	Header      http.Header
	Body        []byte
	// Expected reports whether a status means success; ExpectedText
	// says which do, for the error.
	Expected     func(status int) bool
	ExpectedText string
	// CAFile, if set, holds the PEM CAs the server is verified with,
	// instead of the system's roots.
	CAFile string
	// TLSConfig builds the client's TLS configuration from the CAs of
	// CAFile (nil without one: the system's roots). The caller gives it
	// so that one place builds every TLS configuration of a node
	// (election/clustertls.HTTPJobClientConfig), which jobs, importing
	// nothing of ours, cannot name. Nil: Go's defaults, and a CAFile is
	// refused, since nothing could verify with it.
	TLSConfig func(roots *x509.CertPool) *tls.Config
	// Timeout bounds the whole exchange, body included; 0: none besides
	// ctx.
	Timeout time.Duration
	// MaxOutput caps the response body kept as the run's output; a longer
	// one sets Result.OutputTruncated. 0 means no cap.
	MaxOutput int64
	// BodyErr, if set, is why the body could not be made: nothing is
	// sent, and the attempt fails with it.
	BodyErr error
}

// maxRedirects bounds the redirects an HTTP job follows.
const maxRedirects = 5

// ErrRedirectOffHost is why a redirect to another scheme, host or port is
// not followed: the request carries the attempt's token, which must not
// reach a service the job did not name. The response is then the
// redirect itself, which fails the attempt unless expect_status lists it.
var ErrRedirectOffHost = errors.New("redirect to another scheme, host or port not followed")

// RunHTTP sends req and returns what happened as a command's Result: the
// response body is Stdout, Status the response's status, and Err says
// why the attempt failed (the request could not be sent, or the status is
// not an expected one). ExitCode is 0 for an expected status, else -1:
// there is no process, but Success means the same as for a command. It
// keeps no connection open: a worker sends through HTTPClients instead,
// preparing ahead and sending at the fire time.
func RunHTTP(ctx context.Context, req HTTPRequest) Result {
	return (*HTTPClients)(nil).Prepare(req).Send(ctx)
}

// Bounds of the connections an HTTPClients keeps warm.
const (
	// maxIdlePerTarget is how many idle connections one target keeps: as
	// many requests to it as start at one instant find one ready, up to
	// this; the rest dial, and are closed after their response. A
	// thousand jobs sending to one service at the same second are a
	// third of that on each of three workers, or all of it on one; with
	// 256, a burst of 333 dialed 77 connections every second, and its
	// last requests arrived 8 ms later (fencebench lateness -http, 1,000
	// fires/s). At the worst, 8 targets of 1,024 keep 8,192 idle
	// descriptors (beside those in use), within the 65,536 of
	// deploy/systemd, and some 30 KiB each: about 240 MiB.
	maxIdlePerTarget = 1024
	// maxTargets is how many targets keep a transport; the least recently
	// used one beyond closes its idle connections and is dropped.
	maxTargets = 8
	// idleConnTimeout closes a connection no run used for this long: a
	// job that fires every minute keeps its connection warm.
	idleConnTimeout = 90 * time.Second
)

// HTTPClients keeps one transport, with keep-alives, per target (scheme,
// host and the CAs it is verified with), shared by every run that sends
// to it, so that a run finds a connection already open and, for https,
// already past its handshake. It is bounded: maxTargets transports of
// maxIdlePerTarget idle connections each. The zero value is ready; a nil
// one keeps nothing (each request its own connection, closed after it).
// Safe for concurrent use.
type HTTPClients struct {
	mu      sync.Mutex
	targets map[string]*target
	used    []string // keys of targets, least recently used first
}

// CloseIdle closes every idle connection and drops every transport. A
// worker calls it once its attempts are over; connections still in use
// are closed as their responses end.
func (p *HTTPClients) CloseIdle() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.targets {
		t.close()
	}
	p.targets, p.used = nil, nil
}

// target returns the target's shared transport, making it if needed;
// addr is the host:port it dials, direct whether no proxy stands between.
func (p *HTTPClients) target(key, addr string, direct bool, tlsConf *tls.Config) *target {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.used, key); i >= 0 {
		p.used = append(slices.Delete(p.used, i, i+1), key)
		return p.targets[key]
	}
	if p.targets == nil {
		p.targets = map[string]*target{}
	}
	if len(p.used) >= maxTargets {
		old := p.used[0]
		p.targets[old].close()
		delete(p.targets, old)
		p.used = p.used[1:]
	}
	t := &target{addr: addr, direct: direct}
	t.tr = newTransport(tlsConf)
	t.tr.MaxIdleConns, t.tr.MaxIdleConnsPerHost, t.tr.IdleConnTimeout = maxIdlePerTarget, maxIdlePerTarget, idleConnTimeout
	t.tr.DialContext = t.dial
	p.targets[key] = t
	p.used = append(p.used, key)
	return t
}

// dialer is how every HTTP job's connection is dialed.
var dialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

func newTransport(tlsConf *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: 10 * time.Second,
		DialContext:         dialer.DialContext,
	}
}

// PreparedHTTP is a request made ready ahead of its fire time: its CAs
// read, its transport chosen, its headers and body built. Send sends it
// once.
type PreparedHTTP struct {
	req    HTTPRequest
	client *http.Client
	hreq   *http.Request
	// target is the shared transport's, nil for a request that keeps
	// nothing.
	target *target
	// oneShot is the transport of a request that keeps nothing, closed
	// after it.
	oneShot *http.Transport
	// err is why nothing can be sent; Send returns it.
	err error
}

// Prepare does ahead of the fire time all of req that does not need the
// instant. What went wrong (a CA file that cannot be read, a URL that
// does not parse, a body that did not render) is kept and returned by
// Send, which then sends nothing.
func (p *HTTPClients) Prepare(req HTTPRequest) *PreparedHTTP {
	out := &PreparedHTTP{req: req}
	if req.BodyErr != nil {
		out.err = req.BodyErr
		return out
	}
	var roots *x509.CertPool
	var pem []byte
	if req.CAFile != "" {
		var err error
		if pem, err = os.ReadFile(req.CAFile); err != nil {
			out.err = fmt.Errorf("ca_file: %w", err)
			return out
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			out.err = fmt.Errorf("ca_file %s holds no PEM certificate", req.CAFile)
			return out
		}
	}
	hreq, err := http.NewRequest(req.Method, req.URL, bytes.NewReader(req.Body))
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message repeats the whole URL
		}
		out.err = fmt.Errorf("request: %w", err)
		return out
	}
	for k, vs := range req.Header {
		hreq.Header[k] = vs
	}
	if len(req.Body) == 0 {
		hreq.Body, hreq.ContentLength = http.NoBody, 0
	}
	var tlsConf *tls.Config
	switch {
	case req.TLSConfig != nil:
		tlsConf = req.TLSConfig(roots)
	case roots != nil:
		out.err = fmt.Errorf("ca_file %s: this executor was given no TLS configuration to verify with", req.CAFile)
		return out
	}
	var tr *http.Transport
	if p == nil {
		tr = newTransport(tlsConf)
		tr.DisableKeepAlives = true
		out.oneShot = tr
	} else {
		// A job's CAs verify its own targets only: they are part of the
		// key. The file is read for each run, so a changed one counts
		// from the next run on.
		sum := sha256.Sum256(pem)
		proxy, err := http.ProxyFromEnvironment(hreq)
		out.target = p.target(hreq.URL.Scheme+"://"+hreq.URL.Host+"\x00"+string(sum[:]), canonicalAddr(hreq.URL), proxy == nil && err == nil, tlsConf)
		tr = out.target.tr
	}
	out.hreq = hreq
	out.client = &http.Client{Transport: tr, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		first := via[0].URL
		if r.URL.Scheme != first.Scheme || r.URL.Host != first.Host {
			return http.ErrUseLastResponse
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("more than %d redirects", maxRedirects)
		}
		return nil
	}}
	return out
}

// Header is the header of the prepared request, for what can only be
// known at the instant (the request's own span, for traceparent). Nil if
// nothing will be sent.
func (r *PreparedHTTP) Header() http.Header {
	if r.hreq == nil {
		return nil
	}
	return r.hreq.Header
}

// Send sends the prepared request, once, and returns what happened as
// RunHTTP says. The timeout counts from here.
func (r *PreparedHTTP) Send(ctx context.Context) (res Result) {
	res = Result{ExitCode: -1, Started: time.Now()}
	// Named, so that every return carries the end: a result without one
	// has no duration.
	defer func() { res.Ended = time.Now() }()
	if r.oneShot != nil {
		defer r.oneShot.CloseIdleConnections()
	}
	if err := ctx.Err(); err != nil {
		res.Cancelled = true
		res.Err = fmt.Errorf("not sent: %w", err)
		return res
	}
	if r.err != nil {
		res.Err = r.err
		return res
	}
	req := r.req
	var cancel context.CancelFunc = func() {}
	rctx := ctx
	if req.Timeout > 0 {
		rctx, cancel = context.WithTimeout(ctx, req.Timeout)
	}
	defer cancel()
	resp, err := r.client.Do(r.hreq.WithContext(rctx))
	r.hreq = nil // sent once: its body is read
	r.target.sent()
	if err == nil {
		res.Stdout, res.OutputTruncated, err = readCapped(resp.Body, req.MaxOutput)
		resp.Body.Close()
	}
	// The error is logged and kept in the run's history, which readers
	// without the API token see: it names the service, never the path,
	// query or user info where a credential may be (jobs.Redact).
	where := req.Method + " " + hostOf(req.URL)
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // its message repeats the whole URL
	}
	switch {
	case err != nil && ctx.Err() != nil:
		res.Cancelled = true
		res.Err = fmt.Errorf("%s: %w", where, err)
		return res
	case err != nil && rctx.Err() != nil:
		res.TimedOut = true
		return res
	case err != nil:
		res.Err = fmt.Errorf("%s: %w", where, err)
		return res
	}
	res.Status = resp.StatusCode
	if req.Expected(resp.StatusCode) {
		res.ExitCode = 0
	} else {
		msg := fmt.Sprintf("unexpected status %s from %s (expect_status: %s)", resp.Status, where, req.ExpectedText)
		if loc := resp.Header.Get("Location"); resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != "" {
			msg += fmt.Sprintf("; redirect to %s not followed: %v", hostOf(loc), ErrRedirectOffHost)
		}
		res.Err = errors.New(msg)
		res.StderrTail = string(res.Stdout[:min(len(res.Stdout), DefaultStderrTail)])
	}
	return res
}

// hostOf is raw's scheme and host, scheme://host[:port], or "(hidden)"
// if it has none: as jobs.Redact shows a URL.
func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		return u.Scheme + "://" + u.Host
	}
	return "(hidden)"
}

// readCapped reads r whole, keeping at most max bytes (0: all).
func readCapped(r io.Reader, max int64) ([]byte, bool, error) {
	if max <= 0 {
		b, err := io.ReadAll(r)
		return b, false, err
	}
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if int64(len(b)) > max {
		// The rest is not read: the connection is closed, not kept.
		return b[:max], true, err
	}
	return b, false, err
}

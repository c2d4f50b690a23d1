package executor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
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
// there is no process, but Success means the same as for a command.
func RunHTTP(ctx context.Context, req HTTPRequest) (res Result) {
	res = Result{ExitCode: -1, Started: time.Now()}
	// Named, so that every return carries the end: a result without one
	// has no duration.
	defer func() { res.Ended = time.Now() }()
	if err := ctx.Err(); err != nil {
		res.Cancelled = true
		res.Err = fmt.Errorf("not sent: %w", err)
		return res
	}
	if req.BodyErr != nil {
		res.Err = req.BodyErr
		return res
	}
	var roots *x509.CertPool
	if req.CAFile != "" {
		pem, err := os.ReadFile(req.CAFile)
		if err != nil {
			res.Err = fmt.Errorf("ca_file: %w", err)
			return res
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			res.Err = fmt.Errorf("ca_file %s holds no PEM certificate", req.CAFile)
			return res
		}
	}
	var tlsConf *tls.Config
	switch {
	case req.TLSConfig != nil:
		tlsConf = req.TLSConfig(roots)
	case roots != nil:
		res.Err = fmt.Errorf("ca_file %s: this executor was given no TLS configuration to verify with", req.CAFile)
		return res
	}
	// One transport per request: a job's CA applies to its requests only,
	// and nothing stays open between runs.
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		first := via[0].URL
		if r.URL.Scheme != first.Scheme || r.URL.Host != first.Host {
			return http.ErrUseLastResponse
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("more than %d redirects", maxRedirects)
		}
		return nil
	}}

	var cancel context.CancelFunc = func() {}
	rctx := ctx
	if req.Timeout > 0 {
		rctx, cancel = context.WithTimeout(ctx, req.Timeout)
	}
	defer cancel()
	hreq, err := http.NewRequestWithContext(rctx, req.Method, req.URL, bytes.NewReader(req.Body))
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message repeats the whole URL
		}
		res.Err = fmt.Errorf("request: %w", err)
		return res
	}
	for k, vs := range req.Header {
		hreq.Header[k] = vs
	}
	if len(req.Body) == 0 {
		hreq.Body, hreq.ContentLength = http.NoBody, 0
	}
	resp, err := client.Do(hreq)
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
		// The rest is not read: the connection is not kept anyway.
		return b[:max], true, err
	}
	return b, false, err
}

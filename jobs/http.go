package jobs

import (
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// HTTP is a job that sends one HTTP request instead of running a command
// (the http: field). The worker sends it after establishing the attempt's
// token at the store, exactly where it would start a command, with the
// fence headers (HTTPTokenHeader, HTTPRunIDHeader, HTTPScheduledHeader),
// so that the service it calls can fence its own writes.
type HTTP struct {
	URL string `json:"url" yaml:"url"`
	// Method defaults to GET.
	Method  string            `json:"method,omitempty" yaml:"method"`
	Headers map[string]string `json:"headers,omitempty" yaml:"headers"`
	// Body is a template, rendered as output is (OutputData).
	Body string `json:"body,omitempty" yaml:"body"`
	// ExpectStatus lists the statuses that mean success; empty: any 2xx.
	ExpectStatus []int `json:"expect_status,omitempty" yaml:"expect_status"`
	// CAFile, if set, is the PEM file of the CAs the server's certificate
	// is verified with, instead of the system's roots. It is read on the
	// worker that sends the request.
	CAFile string `json:"ca_file,omitempty" yaml:"ca_file"`
}

// The headers every request of an HTTP job carries. A job's own headers
// may not use the prefix.
const (
	HTTPTokenHeader     = "Fencecron-Token"
	HTTPRunIDHeader     = "Fencecron-Run-Id"
	HTTPScheduledHeader = "Fencecron-Scheduled-At"
	HTTPHeaderPrefix    = "fencecron-"
)

// HTTPMethods are the methods an HTTP job may use.
var HTTPMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// headerNameRE is an HTTP token (RFC 9110 section 5.6.2).
var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// MethodOrDefault returns the request's method, GET if none is given.
func (h *HTTP) MethodOrDefault() string {
	if h.Method == "" {
		return "GET"
	}
	return h.Method
}

// Expected reports whether status means success.
func (h *HTTP) Expected(status int) bool {
	if len(h.ExpectStatus) == 0 {
		return status >= 200 && status <= 299
	}
	return slices.Contains(h.ExpectStatus, status)
}

// ExpectedText says which statuses mean success, for errors.
func (h *HTTP) ExpectedText() string {
	if len(h.ExpectStatus) == 0 {
		return "any 2xx"
	}
	return fmt.Sprint(h.ExpectStatus)
}

// HTTPBody renders the request body of the job's HTTP request for one
// scheduled time, with the data the output template sees.
func (s *Spec) HTTPBody(scheduled time.Time) ([]byte, error) {
	if s.HTTP == nil || s.HTTP.Body == "" {
		return nil, nil
	}
	loc, err := s.Location()
	if err != nil {
		return nil, err
	}
	return s.renderBody(scheduled, loc)
}

// renderBody renders the body template within the bounds of template.go:
// a body is at most MaxHTTPBodyBytes.
func (s *Spec) renderBody(scheduled time.Time, loc *time.Location) ([]byte, error) {
	data := s.templateData(scheduled, loc)
	return renderTemplate("body", s.HTTP.Body, data, MaxHTTPBodyBytes)
}

// checkHTTP returns what is wrong with the http: field of s, as problems
// with "http.<field>". loc is the job's zone (UTC if it is wrong).
func (s *Spec) checkHTTP(loc *time.Location) []FieldError {
	h := s.HTTP
	var errs []FieldError
	bad := func(field string, index int, key, format string, args ...any) {
		errs = append(errs, FieldError{Field: "http." + field, Index: index, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if len(s.Command) > 0 || s.Shell != "" {
		errs = append(errs, FieldError{Field: "http", Index: -1, Msg: "give http, or command or shell, not both"})
	}
	switch u, err := url.Parse(h.URL); {
	case h.URL == "":
		bad("url", -1, "", "required: an http:// or https:// URL")
	case err != nil:
		bad("url", -1, "", "%q: %v", clip(h.URL, 80), err)
	case u.Scheme != "http" && u.Scheme != "https":
		bad("url", -1, "", "%q: the scheme must be http or https, not %q", clip(h.URL, 80), u.Scheme)
	case u.Host == "":
		bad("url", -1, "", "%q: no host", clip(h.URL, 80))
	case u.User != nil:
		bad("url", -1, "", "%q: credentials in the URL would be shown wherever the job is; send them in headers", clip(u.Redacted(), 80))
	}
	if h.Method != "" && !slices.Contains(HTTPMethods, h.Method) {
		bad("method", -1, "", "%q: want one of %s (upper case)", h.Method, strings.Join(HTTPMethods, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(h.Headers)) {
		v := h.Headers[k]
		switch {
		case !headerNameRE.MatchString(k):
			bad("headers", -1, k, "%q is not a header name", k)
		case strings.HasPrefix(strings.ToLower(k), HTTPHeaderPrefix):
			bad("headers", -1, k, "%q: names starting with Fencecron- are the fence headers the worker sets", k)
		case strings.EqualFold(k, "Host") || strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Transfer-Encoding"):
			bad("headers", -1, k, "%q is set by the worker from the request itself", k)
		case strings.ContainsAny(v, "\r\n\x00"):
			bad("headers", -1, k, "%q: the value contains a line break or NUL byte", k)
		}
	}
	for i, st := range h.ExpectStatus {
		if st < 100 || st > 599 {
			bad("expect_status", i, "", "%d: an HTTP status is 100 to 599", st)
		}
	}
	if h.Body != "" {
		if h.MethodOrDefault() == "GET" || h.MethodOrDefault() == "HEAD" {
			bad("body", -1, "", "a %s request has no body; use method: POST or PUT", h.MethodOrDefault())
		} else if _, err := s.renderBody(time.Date(2026, time.December, 31, 23, 59, 58, 0, loc), loc); err != nil {
			bad("body", -1, "", "%v", err)
		}
	}
	if h.CAFile != "" && !filepath.IsAbs(h.CAFile) {
		bad("ca_file", -1, "", "%q: want an absolute path (it is read on the worker)", h.CAFile)
	}
	return errs
}

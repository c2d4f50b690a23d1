package httpstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/errcode"
)

// Client is a fencedstore.Store on the far side of HTTP. It is safe for
// concurrent use.
//
// Through the Store interface (a node's own calls) it signs each call's
// token itself, scoped to the one key and with the request's expiry (or,
// for a request without one, CallTokenTTL from signing), and adds the
// store credential; that needs Signer. PublishSigned and EstablishSigned
// send a token signed elsewhere (a job's FENCECRON_TOKEN) and need no
// Signer.
//
// Errors are the fencedstore sentinels the server named (ErrStaleOwner,
// ErrConflict and ErrExpired with a filled-in Result, ErrInvalidKey, ErrBadToken,
// ErrUnauthorized, ErrOutOfScope, ErrTooLarge, ErrQuota, ErrNotFound), and
// ErrUnavailable when the server cannot be reached or answers 5xx; after
// ErrUnavailable the outcome of a write is unknown and repeating the same
// call is safe.
type Client struct {
	// BaseURL is the serving node, "http://host:port".
	BaseURL string
	// Signer signs tokens for the Store methods and supplies the store
	// credential; nil for a job's process.
	Signer *fencedstore.Signer
	// Job names the scope of tokens the Client signs itself for requests
	// that name no job of their own (Request.Job).
	Job string
	// HTTP is the client used; nil means a default with a 60 s timeout.
	HTTP *http.Client
	// Now is the clock CallTokenTTL counts from; nil means time.Now.
	Now func() time.Time
	// ReadToken, if set and Signer is nil, is sent as "Authorization:
	// Bearer" on reads: an access token (a node with acl enabled answers
	// reads only to a token that may make them).
	ReadToken string
}

// CallTokenTTL is the expiry of a token the Client signs for a request
// that has none of its own: every signed token expires, and a per-key
// token signed for one call needs to outlive only that call, its retries
// and the clock skew between this node and the store's.
const CallTokenTTL = 5 * time.Minute

var (
	_ fencedstore.Store     = (*Client)(nil)
	_ fencedstore.Versioned = (*Client)(nil)
	_ fencedstore.Pager     = (*Client)(nil)
)

var defaultHTTP = &http.Client{Timeout: 60 * time.Second}

// NewClient returns a client of the store served at baseURL ("host:port"
// or "http://host:port").
func NewClient(baseURL string, signer *fencedstore.Signer) *Client {
	return &Client{BaseURL: NormalizeURL(baseURL), Signer: signer}
}

// NormalizeURL turns "host:port" into "http://host:port" and drops a
// trailing "/".
func NormalizeURL(s string) string {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	return strings.TrimRight(s, "/")
}

// keyURL returns the URL of key under base, each path segment escaped.
func (c *Client) keyURL(base, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.BaseURL + base + strings.Join(segs, "/")
}

// sign signs a per-key token for one call: its scope is exactly the key,
// and its job the request's (else c.Job), so the server holds the call to
// that job's floor.
func (c *Client) sign(key, job string, tok fencedstore.Token, attempt string, expires time.Time) (string, error) {
	if err := fencedstore.ValidateKey(key); err != nil {
		return "", err
	}
	if c.Signer == nil {
		return "", fmt.Errorf("%w: this client has no cluster secret to sign tokens with", fencedstore.ErrUnauthorized)
	}
	if expires.IsZero() {
		now := time.Now
		if c.Now != nil {
			now = c.Now
		}
		expires = now().Add(CallTokenTTL)
	}
	if job == "" {
		job = c.Job
	}
	return c.Signer.Sign(fencedstore.SignedToken{Token: tok, Attempt: attempt, Scope: fencedstore.Scope{Job: job, Prefix: key}, Expires: expires})
}

// Establish implements fencedstore.Store.
func (c *Client) Establish(ctx context.Context, req fencedstore.EstablishRequest) (fencedstore.Result, error) {
	text, err := c.sign(req.Key, req.Job, req.Token, req.Attempt, req.Expires)
	if err != nil {
		return fencedstore.Result{}, fmt.Errorf("establish %s: %w", req.Key, err)
	}
	return c.EstablishSigned(ctx, req.Key, text)
}

// Publish implements fencedstore.Store.
func (c *Client) Publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	text, err := c.sign(req.Key, req.Job, req.Token, req.Attempt, req.Expires)
	if err != nil {
		return fencedstore.Result{}, fmt.Errorf("publish %s: %w", req.Key, err)
	}
	return c.PublishSigned(ctx, text, req)
}

// EstablishSigned establishes the signed token text at key.
func (c *Client) EstablishSigned(ctx context.Context, key, token string) (fencedstore.Result, error) {
	return c.write(ctx, http.MethodPost, c.keyURL(establishPath, key), key, token, nil, nil)
}

// PublishSigned publishes req.Body at req.Key (with req.ExpectedVersion)
// under the signed token text; req.Token and req.Attempt are not sent: the
// server takes both from the token.
func (c *Client) PublishSigned(ctx context.Context, token string, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	body := req.Body
	if body == nil {
		body = []byte{}
	}
	return c.write(ctx, http.MethodPut, c.keyURL(storeKeyPath, req.Key), req.Key, token, body, req.ExpectedVersion)
}

func (c *Client) write(ctx context.Context, method, u, key, token string, body []byte, expected *uint64) (fencedstore.Result, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fencedstore.Result{}, fmt.Errorf("%s %s: %w: %v", strings.ToLower(method), key, fencedstore.ErrInvalidKey, err)
	}
	hr.Header.Set(tokenHeader, token)
	// The caller's span, if any (a worker's establish or publish, or
	// `fencecron publish` in a job), is the parent of the store's.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hr.Header))
	if c.Signer != nil {
		hr.Header.Set("Authorization", authScheme+c.Signer.Credential())
	}
	if body != nil {
		hr.Header.Set("Content-Type", contentTypeRaw)
	}
	if expected != nil {
		hr.Header.Set("If-Match", strconv.Quote(strconv.FormatUint(*expected, 10)))
	}
	resp, err := c.do(hr)
	if err != nil {
		return fencedstore.Result{}, err
	}
	defer drainClose(resp)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusConflict, http.StatusPreconditionFailed:
		var d decisionBody
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			return fencedstore.Result{}, fmt.Errorf("%s %s: %w: undecodable answer (%s): %v", method, key, fencedstore.ErrUnavailable, resp.Status, err)
		}
		switch d.Outcome {
		case fencedstore.StaleOwner, fencedstore.Conflict, fencedstore.Expired:
			return d.Result, fmt.Errorf("%s: %w", key, fencedstore.ErrOf(d.Result))
		case fencedstore.Applied, fencedstore.Established:
			return d.Result, nil
		}
		return fencedstore.Result{}, fmt.Errorf("%s %s: unknown outcome %q (%s)", method, key, d.Outcome, resp.Status)
	}
	return fencedstore.Result{}, errorFrom(resp)
}

// RaiseFloor implements fencedstore.Store: POST /api/v1/floor with the
// store credential, which needs Signer (a job's token cannot raise a
// floor).
func (c *Client) RaiseFloor(ctx context.Context, job string, tok fencedstore.Token) (fencedstore.Token, error) {
	if err := fencedstore.ValidateFloor(job, tok); err != nil {
		return fencedstore.Token{}, err
	}
	if c.Signer == nil {
		return fencedstore.Token{}, fmt.Errorf("raise floor of job %s: %w: this client has no cluster secret", job, fencedstore.ErrUnauthorized)
	}
	body, err := json.Marshal(floorRequest{Job: job, Token: tok})
	if err != nil {
		return fencedstore.Token{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+floorPath, bytes.NewReader(body))
	if err != nil {
		return fencedstore.Token{}, fmt.Errorf("raise floor of job %s: %w", job, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", authScheme+c.Signer.Credential())
	resp, err := c.do(hr)
	if err != nil {
		return fencedstore.Token{}, err
	}
	defer drainClose(resp)
	if resp.StatusCode != http.StatusOK {
		return fencedstore.Token{}, errorFrom(resp)
	}
	var ans floorAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return fencedstore.Token{}, fmt.Errorf("raise floor of job %s: %w: undecodable answer: %v", job, fencedstore.ErrUnavailable, err)
	}
	return ans.Floor, nil
}

// drainClose reads what is left of an answer and closes it, so its
// connection goes back to the pool instead of being closed (a new TLS
// handshake for the next call).
func drainClose(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

func (c *Client) do(req *http.Request) (*http.Response, error) {
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), ctxErr)
		}
		return nil, fmt.Errorf("%s %s: %w: %w", req.Method, req.URL.Redacted(), fencedstore.ErrUnavailable, err)
	}
	return resp, nil
}

// errorFrom turns an error answer back into the sentinel the server named
// (errcode.Store), as an *errcode.RemoteError. It takes whatever came: an
// answer without a code it knows stands for ErrUnavailable if it is a
// 5xx, and for nothing else; so do bad_request and method_not_allowed,
// which say this client sent what the store does not take, not what
// happened to a key.
func errorFrom(resp *http.Response) error {
	var b errcode.Body
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err := json.Unmarshal(raw, &b); err != nil || b.Error == "" {
		b.Error = strings.TrimSpace(string(raw))
	}
	re := errcode.Store.Remote(resp.StatusCode, b)
	if errors.Is(re, errcode.ErrBadRequest) || errors.Is(re, errcode.ErrMethod) {
		re.Err = nil
	}
	switch {
	case re.Err != nil:
	case resp.StatusCode >= 500:
		re.Err = fencedstore.ErrUnavailable
	default:
		return &answerError{status: resp.StatusCode, msg: fmt.Sprintf("store answered %s: %s", resp.Status, b.Error)}
	}
	return re
}

// answerError is an error answer that stands for no sentinel: its status
// (StatusCode) tells a client what to do about it, such as send a token.
type answerError struct {
	status int
	msg    string
}

func (e *answerError) Error() string { return e.msg }

// StatusCode is the answer's HTTP status.
func (e *answerError) StatusCode() int { return e.status }

// Get implements fencedstore.Store.
func (c *Client) Get(ctx context.Context, key string) (fencedstore.Object, error) {
	return c.get(ctx, key, c.keyURL(storeKeyPath, key))
}

// GetVersion implements fencedstore.Versioned: version v of key, if the
// serving node's store keeps it.
func (c *Client) GetVersion(ctx context.Context, key string, v uint64) (fencedstore.Object, error) {
	return c.get(ctx, key, c.keyURL(storeKeyPath, key)+"?version="+strconv.FormatUint(v, 10))
}

func (c *Client) get(ctx context.Context, key, u string) (fencedstore.Object, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fencedstore.Object{}, fmt.Errorf("get %s: %w: %v", key, fencedstore.ErrInvalidKey, err)
	}
	c.credential(req)
	resp, err := c.do(req)
	if err != nil {
		return fencedstore.Object{}, err
	}
	defer drainClose(resp)
	if resp.StatusCode != http.StatusOK {
		return fencedstore.Object{}, errorFrom(resp)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fencedstore.Object{}, fmt.Errorf("get %s: %w: %v", key, fencedstore.ErrUnavailable, err)
	}
	h := resp.Header
	obj := fencedstore.Object{Body: body}
	obj.Key, obj.Size = key, int64(len(body))
	obj.Attempt, obj.Hash = h.Get("Fencecron-Attempt"), h.Get("Fencecron-Hash")
	var errs []error
	var e error
	obj.Version, e = strconv.ParseUint(h.Get("Fencecron-Version"), 10, 64)
	errs = append(errs, e)
	obj.Token, e = fencedstore.ParseToken(h.Get(tokenHeader))
	errs = append(errs, e)
	obj.Greatest, e = fencedstore.ParseToken(h.Get("Fencecron-Greatest"))
	errs = append(errs, e)
	if u := h.Get("Fencecron-Updated"); u != "" {
		obj.Updated, e = time.Parse(time.RFC3339Nano, u)
		errs = append(errs, e)
	}
	if err := errors.Join(errs...); err != nil {
		return fencedstore.Object{}, fmt.Errorf("get %s: bad state headers: %v", key, err)
	}
	return obj, nil
}

// List implements fencedstore.Store: it reads every page.
func (c *Client) List(ctx context.Context, prefix string) ([]fencedstore.Meta, error) {
	var all []fencedstore.Meta
	after := ""
	for {
		page, err := c.ListPage(ctx, prefix, after, fencedstore.MaxPageKeys)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Keys...)
		// Keys only grow from page to page, so this ends; a server
		// that answered otherwise is not followed.
		if page.Next == "" || page.Next <= after {
			return all, nil
		}
		after = page.Next
	}
}

// ListPage implements fencedstore.Pager: one GET /api/v1/store page.
func (c *Client) ListPage(ctx context.Context, prefix, after string, limit int) (fencedstore.Page, error) {
	u := c.BaseURL + storePath + "?prefix=" + url.QueryEscape(prefix) + "&limit=" + strconv.Itoa(limit)
	if after != "" {
		u += "&cursor=" + url.QueryEscape(fencedstore.EncodeCursor(prefix, after))
	}
	var out listAnswer
	if err := c.getJSON(ctx, u, &out); err != nil {
		return fencedstore.Page{}, err
	}
	page := fencedstore.Page{Keys: out.Keys}
	if out.Next != "" {
		next, err := fencedstore.DecodeCursor(prefix, out.Next)
		if err != nil {
			return fencedstore.Page{}, fmt.Errorf("list %s: the server's next cursor: %w", prefix, err)
		}
		page.Next = next
	}
	return page, nil
}

// History implements fencedstore.Store.
func (c *Client) History(ctx context.Context, key string) ([]fencedstore.Decision, error) {
	var out struct{ Decisions []fencedstore.Decision }
	err := c.getJSON(ctx, c.keyURL(historyPath, key), &out)
	return out.Decisions, err
}

func (c *Client) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", fencedstore.ErrInvalidKey, err)
	}
	c.credential(req)
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer drainClose(resp)
	if resp.StatusCode != http.StatusOK {
		return errorFrom(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w: undecodable answer: %v", req.URL.Redacted(), fencedstore.ErrUnavailable, err)
	}
	return nil
}

// credential adds a node's store credential to a read: a node serving
// the store with access control on (acl: {enabled: true}) answers reads
// only to whom may make them, and a node may.
func (c *Client) credential(req *http.Request) {
	switch {
	case c.Signer != nil:
		req.Header.Set("Authorization", authScheme+c.Signer.Credential())
	case c.ReadToken != "":
		req.Header.Set("Authorization", authScheme+c.ReadToken)
	}
}

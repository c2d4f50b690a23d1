// Package httpstore serves a fenced store over HTTP and is the client that
// uses it through the same fencedstore.Store interface, so a worker on any
// host publishes to the node that serves the store.
//
// Endpoints (all under /api/v1/; keys may contain "/"):
//
//	GET  /api/v1/store?prefix=P&cursor=C&limit=N
//	                                one page of keys with version and greatest token, in key
//	                                order, and "next", the cursor of the next page, if any
//	GET  /api/v1/store/{key}        the body; state in Fencecron-* headers, ETag "<version>"
//	GET  /api/v1/store/{key}?version=N  an earlier body, if kept (store.keep_versions)
//	PUT  /api/v1/store/{key}        publish the request body
//	POST /api/v1/establish/{key}    establish the token
//	GET  /api/v1/history/{key}      every retained decision on the key
//	POST /api/v1/floor              raise a job's floor: {"job": J, "token": {"epoch": E, "seq": S}}
//	                                -> {"job": J, "floor": {...}}; nodes only (the store credential)
//
// Writes: who presents what.
//
//   - Every write carries a signed fence token in the Fencecron-Token header
//     (fencedstore.Signer's text form). Its MAC proves the cluster minted it,
//     its scope must cover the key, and the store uses its (epoch, seq),
//     attempt and expiry. Nothing else in the request can choose the token,
//     attempt or expiry.
//   - A job's own process presents only that token (FENCECRON_TOKEN, as
//     `fencecron publish` does): it never sees the cluster secret, and the
//     token is its whole write credential, bounded by its scope and fenced
//     by every newer token.
//   - A node (the Client, with the cluster secret) presents the token too,
//     plus "Authorization: Bearer <store credential>" (Signer.Credential).
//     A request with a wrong credential is refused whatever its token. A
//     Handler with RequireCredential refuses writes without the credential,
//     for clusters whose jobs publish only through their stdout.
//   - Raising a job's floor (fencedstore.Store.RaiseFloor: a forced
//     release revokes the job's tokens up to the released one) takes the
//     store credential and no token: a job's own token, which only
//     bounds its writes, must never let it revoke another job's tokens.
//
// Reads are not authenticated, like the rest of the node's API and the
// dashboard.
//
// Limits on writes, so that one job (or many at once) cannot take the
// store's disk or the serving node's memory:
//
//   - One body is at most MaxBodyBytes (store.max_body_bytes, 16 MiB by
//     default): 413, naming the cap.
//   - A job's token is scoped to a directory ("reports/"); the keys under
//     it may hold at most QuotaKeys keys and QuotaBytes bytes
//     (store.quota.keys and store.quota.bytes). A write that would take
//     them beyond either gets 507, naming the limit and the usage. The
//     handler hands the quota to the store with the write
//     (fencedstore.Quota), which counts and writes in one atomic step: so
//     it holds exactly also when several nodes serve one PostgreSQL store.
//     Tokens scoped to one key (the ones nodes sign for their own
//     publishes) are not counted.
//   - The bodies being read and stored at once are at most
//     MaxBodyBytesInFlight (4 × MaxBodyBytes by default; as much again for
//     nodes' own writes, so job tokens cannot starve them): a publish that
//     cannot get its share within BodyWait gets 503 with Retry-After,
//     and nothing was written.
//
// Answers: 200 applied or established, 409 stale_owner or expired (the
// token's expiry had passed when the store decided the write: it changed
// nothing, and is recorded in the key's history like stale_owner), 412
// conflict; the JSON body names the outcome, version and greatest token,
// and the Client turns 409 expired into fencedstore.ErrExpired. Errors are
// JSON {"error": message, "code": code} with 400 (invalid key or request),
// 401 (bad, forged, v1 or missing token; wrong credential),
// 403 (key outside the token's scope; writes disabled), 404, 413 (body
// over the cap), 507 (quota; nothing was written) or 503 (the backend is
// unreachable: the outcome of a write is then unknown, and repeating it is
// safe; or, with Retry-After, too many bodies in flight: nothing was
// written).
package httpstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/errcode"
)

// Paths.
const (
	PathPrefix     = "/api/v1/"
	storePath      = PathPrefix + "store"
	storeKeyPath   = PathPrefix + "store/"
	establishPath  = PathPrefix + "establish/"
	historyPath    = PathPrefix + "history/"
	floorPath      = PathPrefix + "floor"
	tokenHeader    = "Fencecron-Token"
	authScheme     = "Bearer "
	contentTypeRaw = "application/octet-stream"
)

// Handler serves a fencedstore.Store over HTTP. Set the fields, then use it
// as an http.Handler; it routes the paths above by itself, so it can be
// mounted on any router that leaves the request path whole. It is safe for
// concurrent use.
type Handler struct {
	Store fencedstore.Store
	// Signer verifies tokens and the store credential. Without one, every
	// write is refused (403).
	Signer *fencedstore.Signer
	// WritesOff, if set, refuses every write (403 writes_disabled) with
	// this reason, which should name the setting that would allow them
	// (a node that does not serve its store); reads stay open.
	WritesOff string
	// RequireCredential refuses writes that do not carry the store
	// credential, i.e. writes from job processes.
	RequireCredential bool
	// MaxBodyBytes caps a published body; 0 means
	// fencedstore.DefaultMaxBodyBytes (16 MiB).
	MaxBodyBytes int64
	// QuotaKeys and QuotaBytes bound the keys under the directory scope of
	// a job's token (see the package comment); 0 means
	// fencedstore.DefaultQuotaKeys and DefaultQuotaBytes.
	QuotaKeys, QuotaBytes int64
	// MaxBodyBytesInFlight bounds the body bytes being read and stored at
	// once (a body of unknown length counts as MaxBodyBytes); 0 means
	// 4 × MaxBodyBytes.
	MaxBodyBytesInFlight int64
	// BodyWait is how long a publish waits for its share of
	// MaxBodyBytesInFlight before the 503; 0 means DefaultBodyWait.
	BodyWait time.Duration
	Logger   *slog.Logger
	// OnRefused, if set, is called when the store refuses a write of a
	// job's own process (a signed token without the store credential, as
	// `fencecron publish` sends it) as stale_owner or expired, with the
	// verified token (its attempt) and the store's answer, so that the
	// refusal reaches the cluster's ledger. Nodes' own writes are left
	// out: their worker reports the refusal in the attempt's completion,
	// and reporting it here too would count it twice. It is called on the
	// request's goroutine before the answer is written, and must return
	// at once (hand the work to another goroutine; ctx ends with the
	// request).
	OnRefused func(ctx context.Context, st fencedstore.SignedToken, res fencedstore.Result)
	// Tracer, if set, makes a span of every establish and publish, the
	// child of the writer's span when the request carries a traceparent
	// (a worker's, or a job's own `fencecron publish`); nil: none.
	Tracer trace.Tracer

	initOnce sync.Once
	// inFlight is the room of job processes' bodies; nodeInFlight that of
	// nodes' (the store credential's): one job's token, sending slow
	// bodies, must not keep every worker from publishing its stdout.
	inFlight, nodeInFlight *semaphore.Weighted
}

// DefaultBodyWait is how long a publish waits, by default, for room among
// the bodies in flight.
const DefaultBodyWait = 2 * time.Second

func (h *Handler) init() {
	h.initOnce.Do(func() {
		n := h.MaxBodyBytesInFlight
		if n <= 0 {
			n = 4 * h.maxBody()
		}
		h.inFlight = semaphore.NewWeighted(max(n, h.maxBody()))
		h.nodeInFlight = semaphore.NewWeighted(max(n, h.maxBody()))
	})
}

func (h *Handler) maxBody() int64 {
	if h.MaxBodyBytes > 0 {
		return h.MaxBodyBytes
	}
	return fencedstore.DefaultMaxBodyBytes
}

func (h *Handler) quotaKeys() int64 {
	if h.QuotaKeys > 0 {
		return h.QuotaKeys
	}
	return fencedstore.DefaultQuotaKeys
}

func (h *Handler) quotaBytes() int64 {
	if h.QuotaBytes > 0 {
		return h.QuotaBytes
	}
	return fencedstore.DefaultQuotaBytes
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == storePath:
		h.route(w, r, map[string]func(){http.MethodGet: func() { h.list(w, r) }})
	case strings.HasPrefix(p, storeKeyPath):
		key := p[len(storeKeyPath):]
		h.route(w, r, map[string]func(){
			http.MethodGet: func() { h.get(w, r, key) },
			http.MethodPut: func() { h.publish(w, r, key) },
		})
	case strings.HasPrefix(p, establishPath):
		key := p[len(establishPath):]
		h.route(w, r, map[string]func(){http.MethodPost: func() { h.establish(w, r, key) }})
	case p == floorPath:
		h.route(w, r, map[string]func(){http.MethodPost: func() { h.raiseFloor(w, r) }})
	case strings.HasPrefix(p, historyPath):
		key := p[len(historyPath):]
		h.route(w, r, map[string]func(){http.MethodGet: func() { h.history(w, r, key) }})
	default:
		h.error(w, r, fmt.Errorf("%s %s: %w", r.Method, p, fencedstore.ErrNotFound))
	}
}

func (h *Handler) route(w http.ResponseWriter, r *http.Request, methods map[string]func()) {
	m := r.Method
	if m == http.MethodHead {
		m = http.MethodGet
	}
	if f, ok := methods[m]; ok {
		f()
		return
	}
	var allow []string
	for k := range methods {
		allow = append(allow, k)
	}
	slices.Sort(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	h.error(w, r, fmt.Errorf("%w: %s %s", errcode.ErrMethod, r.Method, r.URL.Path))
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	after, err := fencedstore.DecodeCursor(prefix, q.Get("cursor"))
	if err != nil {
		h.error(w, r, err)
		return
	}
	limit := fencedstore.DefaultPageKeys
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > fencedstore.MaxPageKeys {
			h.error(w, r, fmt.Errorf("%w: limit %q: want a number from 1 to %d", errcode.ErrBadRequest, l, fencedstore.MaxPageKeys))
			return
		}
		limit = n
	}
	page, err := fencedstore.ListPage(r.Context(), h.Store, prefix, after, limit)
	if err != nil {
		h.error(w, r, err)
		return
	}
	ans := listAnswer{Keys: page.Keys}
	if ans.Keys == nil {
		ans.Keys = []fencedstore.Meta{}
	}
	if page.Next != "" {
		ans.Next = fencedstore.EncodeCursor(prefix, page.Next)
	}
	writeJSON(w, http.StatusOK, ans)
}

// listAnswer is the JSON answer of GET /api/v1/store: a page of keys and
// the cursor of the next, absent on the last page.
type listAnswer struct {
	Keys []fencedstore.Meta `json:"keys"`
	Next string             `json:"next,omitempty"`
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, key string) {
	var obj fencedstore.Object
	var err error
	if v := r.URL.Query().Get("version"); v != "" {
		n, perr := strconv.ParseUint(v, 10, 64)
		if perr != nil || n == 0 {
			h.error(w, r, fmt.Errorf("%w: version %q: want a version number from 1", errcode.ErrBadRequest, v))
			return
		}
		obj, err = fencedstore.GetVersion(r.Context(), h.Store, key, n)
	} else {
		obj, err = h.Store.Get(r.Context(), key)
	}
	if err != nil {
		h.error(w, r, err)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", contentTypeRaw)
	hd.Set("Content-Length", strconv.Itoa(len(obj.Body)))
	hd.Set("ETag", strconv.Quote(strconv.FormatUint(obj.Version, 10)))
	hd.Set("Fencecron-Version", strconv.FormatUint(obj.Version, 10))
	hd.Set(tokenHeader, obj.Token.String())
	hd.Set("Fencecron-Greatest", obj.Greatest.String())
	hd.Set("Fencecron-Attempt", obj.Attempt)
	hd.Set("Fencecron-Hash", obj.Hash)
	if !obj.Updated.IsZero() {
		hd.Set("Fencecron-Updated", obj.Updated.UTC().Format(time.RFC3339Nano))
	}
	if r.Method != http.MethodHead {
		w.Write(obj.Body)
	}
}

func (h *Handler) history(w http.ResponseWriter, r *http.Request, key string) {
	hist, err := h.Store.History(r.Context(), key)
	if err != nil {
		h.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "decisions": hist})
}

// writable returns why the handler takes no writes at all, or nil.
func (h *Handler) writable() error {
	switch {
	case h.WritesOff != "":
		return fmt.Errorf("%w: %s", errcode.ErrWritesDisabled, h.WritesOff)
	case h.Signer == nil:
		return fmt.Errorf("%w: this store has no cluster secret to verify tokens with", errcode.ErrWritesDisabled)
	}
	return nil
}

// authorize checks a write's credentials and returns its verified token.
func (h *Handler) authorize(r *http.Request, key string) (fencedstore.SignedToken, error) {
	if err := fencedstore.ValidateKey(key); err != nil {
		return fencedstore.SignedToken{}, err
	}
	if err := h.writable(); err != nil {
		return fencedstore.SignedToken{}, err
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		cred, ok := strings.CutPrefix(auth, authScheme)
		if !ok || !h.Signer.CheckCredential(cred) {
			return fencedstore.SignedToken{}, fmt.Errorf("%w: the Authorization header does not carry this cluster's store credential", fencedstore.ErrUnauthorized)
		}
	} else if h.RequireCredential {
		return fencedstore.SignedToken{}, fmt.Errorf("%w: this store takes writes only with the cluster's store credential (Authorization: Bearer)", fencedstore.ErrUnauthorized)
	}
	text := r.Header.Get(tokenHeader)
	if text == "" {
		return fencedstore.SignedToken{}, fmt.Errorf("%w: no %s header: every write needs the signed fence token of its attempt", fencedstore.ErrBadToken, tokenHeader)
	}
	st, err := h.Signer.Verify(text)
	if err != nil {
		return fencedstore.SignedToken{}, err
	}
	if !st.Scope.Covers(key) {
		return fencedstore.SignedToken{}, fmt.Errorf("%w: %q is outside the scope %q of job %q's token", fencedstore.ErrOutOfScope, key, st.Scope.Prefix, st.Scope.Job)
	}
	return st, nil
}

func (h *Handler) publish(w http.ResponseWriter, r *http.Request, key string) {
	st, err := h.authorize(r, key)
	if err != nil {
		h.error(w, r, err)
		return
	}
	req := fencedstore.PublishRequest{Key: key, Token: st.Token, Attempt: st.Attempt, Job: st.Scope.Job, Expires: st.Expires}
	if im := r.Header.Get("If-Match"); im != "" {
		v, err := strconv.ParseUint(strings.Trim(im, `"`), 10, 64)
		if err != nil || strings.HasPrefix(im, "W/") {
			h.error(w, r, fmt.Errorf("%w: If-Match %q is not a version number", errcode.ErrBadRequest, im))
			return
		}
		req.ExpectedVersion = &v
	}
	body, release, err := h.readBody(w, r, key)
	if err != nil {
		h.error(w, r, err)
		return
	}
	defer release() // the store holds the body until it has decided
	req.Body = body
	req.Quota = h.quota(st.Scope)
	ctx, span := h.startSpan(r, "store publish", key, st)
	res, err := h.Store.Publish(ctx, req)
	endSpan(span, st, res, err)
	h.refused(r, st, res, err)
	h.decision(w, r, st, res, err)
}

// readBody reads a publish's body within the cap, once the body has room
// among those in flight; release gives the room back.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, key string) (body []byte, release func(), err error) {
	h.init()
	limit := h.maxBody()
	if r.ContentLength > limit {
		return nil, nil, fmt.Errorf("publish %s: %w: %d bytes; the cap is %d bytes (store.max_body_bytes)", key, fencedstore.ErrTooLarge, r.ContentLength, limit)
	}
	weight := limit // unknown length: as much as it may be
	if r.ContentLength >= 0 {
		weight = r.ContentLength
	}
	room := h.inFlight
	if r.Header.Get("Authorization") != "" { // authorize checked it is the store credential
		room = h.nodeInFlight
	}
	wctx, cancel := context.WithTimeout(r.Context(), cmp.Or(h.BodyWait, DefaultBodyWait))
	err = room.Acquire(wctx, weight)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("publish %s: %w", key, errcode.ErrBusy)
	}
	release = func() { room.Release(weight) }
	in := http.MaxBytesReader(w, r.Body, limit)
	if r.ContentLength >= 0 {
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(in, body)
	} else {
		body, err = io.ReadAll(in)
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		err = fmt.Errorf("publish %s: %w: more than %d bytes; the cap is %d bytes (store.max_body_bytes)", key, fencedstore.ErrTooLarge, limit, limit)
	case err != nil:
		err = fmt.Errorf("%w: reading the body: %v", errcode.ErrBadRequest, err)
	}
	if err != nil {
		release()
		return nil, nil, err
	}
	return body, release, nil
}

// quota is the quota of a write under a token of scope s: the handler's
// quotas over a job's directory scope, which the store checks in the
// write's own atomic step. A token scoped to one key is not counted.
func (h *Handler) quota(s fencedstore.Scope) *fencedstore.Quota {
	if !strings.HasSuffix(s.Prefix, "/") {
		return nil
	}
	return &fencedstore.Quota{Job: s.Job, Prefix: s.Prefix, Keys: h.quotaKeys(), Bytes: h.quotaBytes()}
}

func (h *Handler) establish(w http.ResponseWriter, r *http.Request, key string) {
	st, err := h.authorize(r, key)
	if err != nil {
		h.error(w, r, err)
		return
	}
	ctx, span := h.startSpan(r, "store establish", key, st)
	res, err := h.Store.Establish(ctx, fencedstore.EstablishRequest{Key: key, Token: st.Token, Attempt: st.Attempt, Job: st.Scope.Job, Expires: st.Expires, Quota: h.quota(st.Scope)})
	endSpan(span, st, res, err)
	h.refused(r, st, res, err)
	h.decision(w, r, st, res, err)
}

// maxFloorBody bounds a floor request's body: a job name and a token.
const maxFloorBody = 8 << 10

// floorRequest is the body of POST /api/v1/floor.
type floorRequest struct {
	Job   string            `json:"job"`
	Token fencedstore.Token `json:"token"`
}

// floorAnswer is its answer: the job's floor after the call.
type floorAnswer struct {
	Job   string            `json:"job"`
	Floor fencedstore.Token `json:"floor"`
}

// raiseFloor raises a job's floor for a node (the store credential).
func (h *Handler) raiseFloor(w http.ResponseWriter, r *http.Request) {
	if err := h.writable(); err != nil {
		h.error(w, r, err)
		return
	}
	cred, ok := strings.CutPrefix(r.Header.Get("Authorization"), authScheme)
	if !ok || !h.Signer.CheckCredential(cred) {
		h.error(w, r, fmt.Errorf("%w: raising a job's floor takes this cluster's store credential (Authorization: Bearer), which only nodes hold", fencedstore.ErrUnauthorized))
		return
	}
	var req floorRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxFloorBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		h.error(w, r, fmt.Errorf("%w: the body must be {\"job\": NAME, \"token\": {\"epoch\": E, \"seq\": S}}: %v", errcode.ErrBadRequest, err))
		return
	}
	floor, err := h.Store.RaiseFloor(r.Context(), req.Job, req.Token)
	if err != nil {
		h.error(w, r, err)
		return
	}
	h.logger().Warn("store floor raised: the job's tokens up to it are refused", "job", req.Job, "floor", floor, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, floorAnswer{Job: req.Job, Floor: floor})
}

// refused calls OnRefused for a job's own write the store refused.
func (h *Handler) refused(r *http.Request, st fencedstore.SignedToken, res fencedstore.Result, err error) {
	if h.OnRefused == nil || r.Header.Get("Authorization") != "" || // a node's write (authorize checked the credential)
		!(errors.Is(err, fencedstore.ErrStaleOwner) || errors.Is(err, fencedstore.ErrExpired)) {
		return
	}
	h.OnRefused(r.Context(), st, res)
}

// decisionBody is the JSON answer to a write the store decided.
type decisionBody struct {
	fencedstore.Result
	Error string `json:"error,omitempty"`
}

func (h *Handler) decision(w http.ResponseWriter, r *http.Request, st fencedstore.SignedToken, res fencedstore.Result, err error) {
	if err != nil && !fencedstore.IsDecision(err) {
		h.error(w, r, err)
		return
	}
	body := decisionBody{Result: res}
	if err != nil {
		body.Error = err.Error()
		h.logger().Info("store refused a write", st.LogArgs("key", res.Key, "outcome", res.Outcome, "greatest", res.Greatest, "remote", r.RemoteAddr)...)
	}
	w.Header().Set("Fencecron-Version", strconv.FormatUint(res.Version, 10))
	w.Header().Set("Fencecron-Greatest", res.Greatest.String())
	status := http.StatusOK
	if err != nil {
		status, _ = errcode.Store.StatusOf(err)
	}
	writeJSON(w, status, body)
}

func (h *Handler) error(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := errcode.Store.StatusOf(err)
	if status >= 500 {
		h.logger().Error("store request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Fencecron-Token, Bearer realm="fencecron store"`)
	}
	if errors.Is(err, errcode.ErrBusy) {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, errcode.Store.Body(err))
}

func (h *Handler) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Attributes of the store's spans: the same keys as the worker's spans
// of the same writes (scheduler/runtrace).
const (
	attrKey      = "fencecron.key"
	attrAttempt  = "fencecron.attempt"
	attrToken    = "fencecron.token"
	attrOutcome  = "fencecron.store.outcome"
	attrGreatest = "fencecron.store.greatest"
)

// startSpan starts the span of a write (tracing on), under the writer's
// span if the request names one.
func (h *Handler) startSpan(r *http.Request, name, key string, st fencedstore.SignedToken) (context.Context, trace.Span) {
	if h.Tracer == nil {
		return r.Context(), nil
	}
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return h.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String(attrKey, key), attribute.String(attrAttempt, st.Attempt), attribute.String(attrToken, st.Token.String())))
}

// endSpan ends a write's span with the store's decision: a refusal is an
// error, with an event carrying both tokens.
func endSpan(span trace.Span, st fencedstore.SignedToken, res fencedstore.Result, err error) {
	if span == nil {
		return
	}
	if res.Outcome != "" {
		span.SetAttributes(attribute.String(attrOutcome, string(res.Outcome)), attribute.String(attrGreatest, res.Greatest.String()))
	}
	switch {
	case errors.Is(err, fencedstore.ErrStaleOwner) || errors.Is(err, fencedstore.ErrExpired):
		span.AddEvent("write refused", trace.WithAttributes(attribute.String(attrOutcome, string(res.Outcome)),
			attribute.String(attrToken, st.Token.String()), attribute.String(attrGreatest, res.Greatest.String())))
		span.SetStatus(codes.Error, "the store refused the write: "+string(res.Outcome))
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

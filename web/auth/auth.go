// Package auth decides who may change things through a node's public
// API and its dashboard, and who may read the job set's secrets: the API
// token, browser sessions with their CSRF tokens, the login throttle and
// the lockouts it writes to the audit trail. The API and the dashboard
// both ask one Guard, so a button and the request behind it are judged
// alike.
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencecron/fencecron/fencedstore/keyring"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// Who may change things through the public API and the dashboard.
//
//   - ReadOnly refuses every mutating public endpoint with 403.
//   - With an API token, a mutating request must carry it as
//     "Authorization: Bearer TOKEN" (the CLI), or come from a browser that
//     logged in at /login (a session cookie, see sessionTable) and echo
//     that session's CSRF token in the X-Fencecron-CSRF header or a csrf
//     form field. Wrong tokens are throttled per client address
//     (throttle.go), logged, counted and, per lockout, audited.
//   - Without one, only clients on the node's own host (a loopback peer
//     address) may act; others get 403 naming api.token, and the
//     dashboard shows them no buttons.
//
// In every case a browser request from another origin (Sec-Fetch-Site or
// Origin naming another site) is refused, so a page elsewhere cannot make
// a visitor's browser trigger jobs on a node it can reach, and a request
// addressed to a name that is not this node's is refused before any of
// this (web/host.go), so a page cannot pose as this node's own origin
// either.

const (
	// SessionCookie names a browser's session; CSRFHeader and CSRFField
	// carry its CSRF token on a script's request and a form's.
	SessionCookie = "fencecron_session"
	CSRFHeader    = "X-Fencecron-CSRF"
	CSRFField     = "csrf"
	sessionTTL    = 12 * time.Hour
	// MaxLoginBody bounds the login form: a token and a path.
	MaxLoginBody = 16 << 10

	// Reasons of fencecron_login_failures_total.
	loginWrongToken = "wrong_token"
	loginLockedOut  = "locked_out"
)

// Auditor writes a lockout to the cluster's audit trail
// (scheduler.Scheduler's Audit: a Raft entry, proposed through the
// leader).
type Auditor interface {
	Audit(ctx context.Context, kind, node, detail string) error
}

// Config is what a Guard judges by.
type Config struct {
	// Token is api.token: if set, required by every change; ReadOnly
	// (api.read_only) refuses every change.
	Token    string
	ReadOnly bool
	Clock    jobs.Clock
	Logger   *slog.Logger
	// Auditor records lockouts as the node named Node saw them.
	Auditor Auditor
	Node    string
	// Base is the context lockouts are written under: the server cancels
	// it as it closes, before it waits (Close).
	Base context.Context
	// ACL turns access control on (acl.go); ACLState reads the
	// replicated ACL state; NodeCredential is the store credential nodes
	// present (a node's identity).
	ACL            bool
	ACLState       func() *acl.State
	NodeCredential string
}

// Guard holds the sessions, the throttle and the lockouts waiting for the
// audit trail of one node's HTTP server. Safe for concurrent use.
type Guard struct {
	cfg Config
	// key signs session cookies: derived from api.token, so changing the
	// token ends every session, or random per process on a node without
	// one (ACL logins).
	key      []byte
	throttle *loginThrottle
	sessions *sessionTable
	audits   *auditLimiter
	// failures counts refused logins by reason: wrong_token, or
	// locked_out (refused unchecked during a lockout).
	failures *prometheus.CounterVec

	// background holds the audit writer a request leaves behind; Close
	// waits for it.
	background sync.WaitGroup
	bgMu       sync.Mutex
	bgClosed   bool
	// auditQueue holds lockouts for the one audit writer, in order;
	// auditWriting says it runs (both under bgMu).
	auditQueue   []pendingAudit
	auditWriting bool
}

// New returns a Guard with no sessions and no failures counted.
func New(cfg Config) *Guard {
	if cfg.Base == nil {
		cfg.Base = context.Background()
	}
	key := keyring.Derive([]byte(cfg.Token), keyring.Session)
	if cfg.Token == "" {
		key = make([]byte, 32)
		rand.Read(key)
	}
	g := &Guard{
		cfg:      cfg,
		key:      key,
		throttle: newLoginThrottle(loginTableSize),
		sessions: newSessionTable(maxSessions),
		audits:   newAuditLimiter(),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencecron_login_failures_total",
			Help: "Dashboard logins this node refused: reason wrong_token, or locked_out (the client address was locked out after failures; the token was not checked).",
		}, []string{"reason"}),
	}
	g.failures.WithLabelValues(loginWrongToken)
	g.failures.WithLabelValues(loginLockedOut)
	return g
}

// Collectors are the Guard's figures, for the node's registry.
func (g *Guard) Collectors() []prometheus.Collector { return []prometheus.Collector{g.failures} }

// Close waits for the lockouts being written to the audit trail; none is
// queued after it began. Cancel Config.Base first to cut them short.
func (g *Guard) Close() {
	g.bgMu.Lock()
	g.bgClosed = true
	g.bgMu.Unlock()
	g.background.Wait()
}

// Required reports whether changes need the API token.
func (g *Guard) Required() bool { return g.cfg.Token != "" }

// CanLogIn reports whether the login form takes a token: the API token,
// or with ACLs on an ACL token.
func (g *Guard) CanLogIn() bool { return g.cfg.Token != "" || g.cfg.ACL }

// State is what a page knows about the request's right to act.
type State struct {
	// Required: acting needs a credential (api.token, or ACLs are on).
	// LoggedIn: this browser holds a valid session. ReadOnly: nothing can
	// be changed here. LocalOnly: the node has no token and this client
	// is not on its host, so it may not act.
	Required, LoggedIn, ReadOnly, LocalOnly bool
	// CanAct: some button works for this request (Can says which). CSRF
	// is its form token.
	CanAct bool
	CSRF   string
	// With ACLs on: Who names the caller, Namespaces those it reads in;
	// can says what it holds where.
	Who        string
	Namespaces []string
	can        func(ns string, c acl.Capability) bool
}

// Can says whether a button that needs capability c on job works for
// this request: with ACLs on, the caller must hold c in the job's
// namespace.
func (a State) Can(c string, job string) bool {
	if !a.CanAct || a.can == nil {
		return a.CanAct
	}
	ns, _ := jobs.SplitQualified(job)
	return a.can(ns, acl.Capability(c))
}

// actions are the capabilities behind the dashboard's buttons.
var actions = []acl.Capability{acl.CapTrigger, acl.CapPause, acl.CapRelease, acl.CapBackfill}

func (g *Guard) mac(parts ...string) string {
	m := hmac.New(sha256.New, g.key)
	m.Write([]byte(strings.Join(parts, "|")))
	return hex.EncodeToString(m.Sum(nil))
}

// newSession starts a session of accessor ("" for api.token) and
// returns its cookie value: nonce.expiry.mac. The session lives in
// g.sessions until it expires or its browser logs out, and one of an ACL
// token until that token is revoked or expires.
func (g *Guard) newSession(accessor string, now time.Time) string {
	var b [16]byte
	rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	exp := now.Add(sessionTTL)
	expText := strconv.FormatInt(exp.Unix(), 10)
	g.sessions.add(nonce, accessor, exp, now)
	return nonce + "." + expText + "." + g.mac("session", nonce, expText)
}

// sessionNonce returns the nonce of the request's cookie if it is signed
// with this Guard's key, or "". It does not check that it is live.
func (g *Guard) sessionNonce(r *http.Request) string {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return ""
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 {
		return ""
	}
	want := g.mac("session", parts[0], parts[1])
	if subtle.ConstantTimeCompare([]byte(parts[2]), []byte(want)) != 1 {
		return ""
	}
	return parts[0]
}

// session returns the request's cookie value if it names a live session,
// or "".
func (g *Guard) session(r *http.Request) string {
	v, _ := g.liveSession(r)
	return v
}

// liveSession returns the request's cookie value and its session, or ""
// if it names none that is live.
func (g *Guard) liveSession(r *http.Request) (string, sessionEntry) {
	nonce := g.sessionNonce(r)
	if nonce == "" {
		return "", sessionEntry{}
	}
	e, ok := g.sessions.lookup(nonce, g.cfg.Clock.Now())
	if !ok {
		return "", sessionEntry{}
	}
	c, _ := r.Cookie(SessionCookie)
	return c.Value, e
}

// csrfToken is the per-session token forms and fetches must echo.
func (g *Guard) csrfToken(session string) string {
	if session == "" {
		return ""
	}
	return g.mac("csrf", session)[:32]
}

// Of says what r may do, for a page to show the buttons that work.
func (g *Guard) Of(r *http.Request) State {
	a := State{Required: g.CanLogIn(), ReadOnly: g.cfg.ReadOnly}
	if sess := g.session(r); sess != "" {
		a.LoggedIn, a.CSRF = true, g.csrfToken(sess)
	}
	a.LocalOnly = !a.Required && !IsLoopbackClient(r)
	a.CanAct = !a.ReadOnly && (a.LoggedIn || (!a.Required && !a.LocalOnly))
	if id, ok := IdentityOf(r.Context()); ok {
		// A button shows only where the caller holds what it needs.
		a.Who, a.Namespaces, a.can = Describe(id), id.Namespaces(acl.CapRead), id.Allowed
		a.CanAct = a.CanAct && slices.ContainsFunc(actions, id.AnyNamespace)
	}
	return a
}

var crossOrigin = http.NewCrossOriginProtection()

// CrossOrigin says why r, a browser's request from another site, may not
// change anything here, or nil.
func CrossOrigin(r *http.Request) error { return crossOrigin.Check(r) }

// AuthorizeWrite says why r may not change anything, or nil.
func (g *Guard) AuthorizeWrite(r *http.Request) error {
	if err := crossOrigin.Check(r); err != nil {
		return fmt.Errorf("%w: a cross-origin browser request may not change anything here (%v)", wire.ErrForbidden, err)
	}
	if g.cfg.ReadOnly {
		return fmt.Errorf("%w: this node's API is read-only (api.read_only: true); use another node", wire.ErrForbidden)
	}
	if g.cfg.ACL {
		// The route table judged the identity (acl.go); a browser
		// session must still echo its CSRF token.
		// A signed cookie, even of a session that ended since.
		if r.Header.Get("Authorization") == "" && g.sessionNonce(r) != "" {
			return g.checkCSRF(r)
		}
		if _, err := g.Identify(r); err != nil {
			return err
		}
		return nil
	}
	if g.cfg.Token == "" {
		// Without a token, whoever reaches the port could act; a node
		// bound to a public address would run anyone's commands. Only
		// the node's own host may, then.
		if !IsLoopbackClient(r) {
			return fmt.Errorf("%w: this node has no API token (api.token), so only clients on its own host may change anything; "+
				"set api.token on the node and send it as \"Authorization: Bearer TOKEN\" (fencecron -token or FENCECRON_API_TOKEN), or log in at /login", wire.ErrForbidden)
		}
		return nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		return g.checkBearer(r, h)
	}
	if g.session(r) != "" {
		return g.checkCSRF(r)
	}
	return fmt.Errorf("%w: this needs the API token: send \"Authorization: Bearer TOKEN\" (fencecron -token or FENCECRON_API_TOKEN), or log in at /login", wire.ErrUnauthorized)
}

// checkCSRF says why r, from a browser with a live session, does not
// echo its session's CSRF token, or nil.
func (g *Guard) checkCSRF(r *http.Request) error {
	got := r.Header.Get(CSRFHeader)
	if got == "" && IsForm(r) {
		got = r.PostFormValue(CSRFField)
	}
	sess := g.session(r)
	if sess == "" {
		return fmt.Errorf("%w: your session has ended; log in again", wire.ErrUnauthorized)
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(g.csrfToken(sess))) != 1 {
		return fmt.Errorf("%w: missing or wrong CSRF token; reload the page and try again", wire.ErrForbidden)
	}
	return nil
}

// checkBearer checks an Authorization header h a request carries: nil
// if it is "Bearer" and the API token, else checkToken's error.
func (g *Guard) checkBearer(r *http.Request, h string) error {
	got, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return fmt.Errorf("%w: wrong API token (the Authorization header must be \"Bearer\" and api.token)", wire.ErrUnauthorized)
	}
	if err := g.checkToken(r, got, "bearer"); err != nil {
		return fmt.Errorf("%w (the Authorization header must be \"Bearer\" and api.token)", err)
	}
	return nil
}

// IsForm reports whether r carries a form (a dashboard's post without
// script), which answers and CSRF tokens treat apart from JSON.
func IsForm(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/x-www-form-urlencoded") || strings.HasPrefix(ct, "multipart/form-data")
}

// lockedOut is a refusal whose answer says when to try again: the
// error writer sets Retry-After from RetryAfter.
type lockedOut struct {
	after time.Duration
	err   error
}

func (e *lockedOut) Error() string             { return e.err.Error() }
func (e *lockedOut) Unwrap() error             { return e.err }
func (e *lockedOut) RetryAfter() time.Duration { return e.after }

// checkToken checks a token a client presented (at /login, or as a
// Bearer header: via says which) under the throttle of throttle.go:
// nil if it is the API token, an error that maps to 401 if not, and one
// that maps to 429 if the client's address is locked out, in which case
// the token is not even compared.
func (g *Guard) checkToken(r *http.Request, got, via string) error {
	client, now := clientKey(r), g.cfg.Clock.Now()
	if wait := g.throttle.locked(client, now); wait > 0 {
		g.failures.WithLabelValues(loginLockedOut).Inc()
		return &lockedOut{after: wait, err: fmt.Errorf("%w: too many wrong tokens from your address (%s); try again in %s", wire.ErrTooMany, client, wait.Round(time.Second))}
	}
	// An empty token matches nothing, not a node without api.token.
	if g.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(g.cfg.Token)) == 1 {
		g.throttle.succeed(client)
		return nil
	}
	lockout, failures := g.throttle.fail(client, now)
	g.failures.WithLabelValues(loginWrongToken).Inc()
	g.cfg.Logger.Warn("wrong API token", "client", client, "remote", r.RemoteAddr, "via", via)
	if lockout == 0 {
		return fmt.Errorf("%w: wrong API token", wire.ErrUnauthorized)
	}
	g.cfg.Logger.Warn("client locked out after wrong API tokens", "client", client, "failures", failures, "lockout", lockout)
	g.auditLockout(client, failures, lockout, now)
	return &lockedOut{after: lockout, err: fmt.Errorf("%w: wrong API token; too many from your address (%s), locked out for %s", wire.ErrUnauthorized, client, lockout)}
}

// auditLockout records a lockout in the cluster's audit trail, in the
// background (it is a Raft entry, and the client need not wait for it),
// unless this node has proposed too many lately (see auditLimiter).
func (g *Guard) auditLockout(client string, failures int, lockout time.Duration, now time.Time) {
	ok, leftOut := g.audits.allow(now)
	if !ok {
		g.cfg.Logger.Warn("lockout not written to the audit trail: too many lately; the next entry counts it", "client", client)
		return
	}
	detail := fmt.Sprintf("%d failed %s from %s; locked out for %s", failures, pluralOf(failures, "login", "logins"), client, lockout)
	if leftOut > 0 {
		detail += fmt.Sprintf(" (and %d more %s on this node not recorded one by one)", leftOut, pluralOf(leftOut, "lockout", "lockouts"))
	}
	// One writer proposes them in the order the lockouts happened (a
	// goroutine each would let a later lockout overtake an earlier one in
	// the trail); auditLimiter bounds how many wait. Close waits for the
	// writer; once it has begun, a handler it could not wait for
	// (Shutdown timed out) queues nothing.
	g.bgMu.Lock()
	defer g.bgMu.Unlock()
	if g.bgClosed {
		return
	}
	g.auditQueue = append(g.auditQueue, pendingAudit{client: client, node: g.cfg.Node, detail: detail})
	if g.auditWriting {
		return
	}
	g.auditWriting = true
	g.background.Add(1)
	go g.writeAudits()
}

// pendingAudit is a lockout waiting to be written to the audit trail.
type pendingAudit struct{ client, node, detail string }

// writeAudits proposes the queued lockouts one by one until none is left.
func (g *Guard) writeAudits() {
	defer g.background.Done()
	for {
		g.bgMu.Lock()
		if len(g.auditQueue) == 0 {
			g.auditWriting = false
			g.bgMu.Unlock()
			return
		}
		a := g.auditQueue[0]
		g.auditQueue = g.auditQueue[1:]
		g.bgMu.Unlock()
		ctx, cancel := context.WithTimeout(g.cfg.Base, 30*time.Second)
		if err := g.cfg.Auditor.Audit(ctx, jobs.EventLoginFailed, a.node, a.detail); err != nil {
			g.cfg.Logger.Warn("lockout not written to the audit trail", "client", a.client, "err", err)
		}
		cancel()
	}
}

func pluralOf(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// LocalPath returns p if it is a plain absolute path on this server,
// else "/": the only places login's next= and a form's back= may send a
// browser. It refuses, in p and in p with its escapes decoded once:
// control characters (browsers drop a tab or newline, so "/\t/host"
// becomes "//host", another host), backslashes (read as "/"), a leading
// "//", and anything with a scheme, a host or user info.
func LocalPath(p string) string {
	if !isLocalPath(p) {
		return "/"
	}
	return p
}

func isLocalPath(p string) bool {
	if !strings.HasPrefix(p, "/") || len(p) > 2048 {
		return false
	}
	decoded, err := url.PathUnescape(p)
	if err != nil {
		return false
	}
	for _, v := range []string{p, decoded} {
		if strings.HasPrefix(v, "//") || strings.Contains(v, `\`) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			return false
		}
	}
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == "" && u.User == nil && u.Opaque == "" && strings.HasPrefix(u.Path, "/")
}

// Login checks the token a browser presented at /login (throttled as a
// Bearer token is) and, if it is the API token or, with ACLs on, a live
// ACL token, starts a session and sets its cookie. Its error maps to
// 401 or 429 (wire.StatusOf), and one of a lockout says when to try
// again (RetryAfter).
func (g *Guard) Login(w http.ResponseWriter, r *http.Request, token string) error {
	accessor, err := g.loginAccessor(r, token)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: g.newSession(accessor, g.cfg.Clock.Now()), Path: "/",
		MaxAge: int(sessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	return nil
}

// loginAccessor is whose session a login with token starts: "" for
// api.token, or an ACL token's accessor with ACLs on. Any other token is
// throttled as a wrong api.token is.
func (g *Guard) loginAccessor(r *http.Request, token string) (string, error) {
	if g.cfg.ACL && (g.cfg.Token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(g.cfg.Token)) != 1) {
		id, err := g.aclState().Resolve(token, g.cfg.Clock.Now())
		switch {
		case err == nil:
			return id.Accessor, nil
		case !errors.Is(err, acl.ErrUnknownToken):
			return "", err
		}
	}
	return "", g.checkToken(r, token, "login")
}

// aclState is the replicated ACL state as this node has it (nil without
// one: no token resolves).
func (g *Guard) aclState() *acl.State {
	if g.cfg.ACLState == nil {
		return nil
	}
	return g.cfg.ACLState()
}

// Logout ends the browser's session on the server, so its cookie
// authorizes nothing from now on, wherever a copy of it is, and clears
// the cookie.
func (g *Guard) Logout(w http.ResponseWriter, r *http.Request) {
	if nonce := g.sessionNonce(r); nonce != "" {
		g.sessions.remove(nonce)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// SeesSecrets reports whether r may see the secrets job specs hold: a
// holder of the API token (Bearer, or a dashboard login), or, on a node
// without one, a client on its own host. Whoever may replace the job set
// may read it whole. A wrong Bearer token is an error (401, throttled as
// any other), never a quiet fall back to the redacted view.
func (g *Guard) SeesSecrets(r *http.Request) (bool, error) {
	if id, ok := IdentityOf(r.Context()); ok {
		// With ACLs, whoever may apply every namespace's jobs.
		return id.AllNamespaces(acl.CapApply), nil
	}
	if g.cfg.Token == "" {
		return IsLoopbackClient(r), nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if err := g.checkBearer(r, h); err != nil {
			return false, err
		}
		return true, nil
	}
	return g.session(r) != "", nil
}

// Asker names who made a change, for the audit trail: AuthorizeWrite has
// let r through already. api.token is one shared token without a name of
// its own, so the name says how the caller proved it holds it and from
// which address: "api.token (bearer) from 10.0.0.7", "api.token
// (dashboard login) from ...", or, on a node without api.token,
// "loopback 127.0.0.1".
func (g *Guard) Asker(r *http.Request) string {
	if who, ok := g.askerACL(r); ok {
		return who
	}
	client := clientKey(r)
	switch {
	case g.cfg.Token == "":
		return "loopback " + client
	case r.Header.Get("Authorization") != "":
		return "api.token (bearer) from " + client
	default:
		return "api.token (dashboard login) from " + client
	}
}

// IsLoopbackClient reports whether r comes from this host: its peer
// address (never a forwarded-for header) is a loopback address.
func IsLoopbackClient(r *http.Request) bool {
	ip := remoteIP(r)
	return ip != nil && ip.IsLoopback()
}

// remoteIP is the IP address of r's peer, or nil.
func remoteIP(r *http.Request) net.IP {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return net.ParseIP(host)
}

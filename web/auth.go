package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/fencecron/fencecron/fencedstore/keyring"
	"github.com/fencecron/fencecron/jobs"
)

// Who may change things through the public API and the dashboard.
//
//   - ReadOnly refuses every mutating public endpoint with 403.
//   - With an APIToken, a mutating request must carry it as
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
// this (host.go), so a page cannot pose as this node's own origin either.

const (
	sessionCookie = "fencecron_session"
	csrfHeader    = "X-Fencecron-CSRF"
	csrfField     = "csrf"
	sessionTTL    = 12 * time.Hour
	// maxLoginBody bounds the login form: a token and a path.
	maxLoginBody = 16 << 10

	// Reasons of fencecron_login_failures_total.
	loginWrongToken = "wrong_token"
	loginLockedOut  = "locked_out"
)

// auth is what a page knows about the request's right to act.
type auth struct {
	// Required: the node has an API token. LoggedIn: this browser holds a
	// valid session. ReadOnly: nothing can be changed here. LocalOnly: the
	// node has no token and this client is not on its host, so it may not
	// act.
	Required, LoggedIn, ReadOnly, LocalOnly bool
	// CanAct: buttons work for this request. CSRF is its form token.
	CanAct bool
	CSRF   string
}

// sessionKey derives the key sessions are signed with from the API token,
// so changing the token ends every session.
func (s *Server) sessionKey() []byte { return keyring.Derive([]byte(s.APIToken), keyring.Session) }

func (s *Server) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.sessionKey())
	m.Write([]byte(strings.Join(parts, "|")))
	return hex.EncodeToString(m.Sum(nil))
}

// newSession starts a session and returns its cookie value:
// nonce.expiry.mac. The session lives in s.sessions until it expires or
// its browser logs out.
func (s *Server) newSession(now time.Time) string {
	var b [16]byte
	rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	exp := now.Add(sessionTTL)
	expText := strconv.FormatInt(exp.Unix(), 10)
	s.sessions.add(nonce, exp, now)
	return nonce + "." + expText + "." + s.mac("session", nonce, expText)
}

// sessionNonce returns the nonce of the request's cookie if it is signed
// with the current token, or "". It does not check that it is live.
func (s *Server) sessionNonce(r *http.Request) string {
	if s.APIToken == "" {
		return ""
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 {
		return ""
	}
	want := s.mac("session", parts[0], parts[1])
	if subtle.ConstantTimeCompare([]byte(parts[2]), []byte(want)) != 1 {
		return ""
	}
	return parts[0]
}

// session returns the request's cookie value if it names a live session,
// or "".
func (s *Server) session(r *http.Request) string {
	nonce := s.sessionNonce(r)
	if nonce == "" || !s.sessions.valid(nonce, s.Clock.Now()) {
		return ""
	}
	c, _ := r.Cookie(sessionCookie)
	return c.Value
}

// csrfToken is the per-session token forms and fetches must echo.
func (s *Server) csrfToken(session string) string {
	if session == "" {
		return ""
	}
	return s.mac("csrf", session)[:32]
}

func (s *Server) authOf(r *http.Request) auth {
	a := auth{Required: s.APIToken != "", ReadOnly: s.ReadOnly}
	if sess := s.session(r); sess != "" {
		a.LoggedIn, a.CSRF = true, s.csrfToken(sess)
	}
	a.LocalOnly = !a.Required && !isLoopbackClient(r)
	a.CanAct = !a.ReadOnly && (a.LoggedIn || (!a.Required && !a.LocalOnly))
	return a
}

var crossOrigin = http.NewCrossOriginProtection()

// authorizeWrite says why r may not change anything, or nil.
func (s *Server) authorizeWrite(r *http.Request) error {
	if err := crossOrigin.Check(r); err != nil {
		return fmt.Errorf("%w: a cross-origin browser request may not change anything here (%v)", errForbidden, err)
	}
	if s.ReadOnly {
		return fmt.Errorf("%w: this node's API is read-only (api.read_only: true); use another node", errForbidden)
	}
	if s.APIToken == "" {
		// Without a token, whoever reaches the port could act; a node
		// bound to a public address would run anyone's commands. Only
		// the node's own host may, then.
		if !isLoopbackClient(r) {
			return fmt.Errorf("%w: this node has no API token (api.token), so only clients on its own host may change anything; "+
				"set api.token on the node and send it as \"Authorization: Bearer TOKEN\" (fencecron -token or FENCECRON_API_TOKEN), or log in at /login", errForbidden)
		}
		return nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		return s.checkBearer(r, h)
	}
	if sess := s.session(r); sess != "" {
		got := r.Header.Get(csrfHeader)
		if got == "" && isForm(r) {
			got = r.PostFormValue(csrfField)
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.csrfToken(sess))) != 1 {
			return fmt.Errorf("%w: missing or wrong CSRF token; reload the page and try again", errForbidden)
		}
		return nil
	}
	return fmt.Errorf("%w: this needs the API token: send \"Authorization: Bearer TOKEN\" (fencecron -token or FENCECRON_API_TOKEN), or log in at /login", errUnauthorized)
}

// checkBearer checks an Authorization header h a request carries: nil
// if it is "Bearer" and the API token, else checkToken's error.
func (s *Server) checkBearer(r *http.Request, h string) error {
	got, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return fmt.Errorf("%w: wrong API token (the Authorization header must be \"Bearer\" and api.token)", errUnauthorized)
	}
	if err := s.checkToken(r, got, "bearer"); err != nil {
		return fmt.Errorf("%w (the Authorization header must be \"Bearer\" and api.token)", err)
	}
	return nil
}

// requireWrite guards the mutating public endpoints.
func (s *Server) requireWrite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.authorizeWrite(r); err != nil {
			s.error(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isForm(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/x-www-form-urlencoded") || strings.HasPrefix(ct, "multipart/form-data")
}

// retryError is an error whose answer says when to try again
// (Retry-After).
type retryError struct {
	after time.Duration
	err   error
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// retryAfter is d in whole seconds, rounded up, as Retry-After wants it.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// checkToken checks a token a client presented (at /login, or as a
// Bearer header: via says which) under the throttle of throttle.go:
// nil if it is the API token, an error that maps to 401 if not, and one
// that maps to 429 if the client's address is locked out, in which case
// the token is not even compared.
func (s *Server) checkToken(r *http.Request, got, via string) error {
	client, now := clientKey(r), s.Clock.Now()
	if wait := s.throttle.locked(client, now); wait > 0 {
		s.metrics().loginFailed(loginLockedOut)
		return &retryError{after: wait, err: fmt.Errorf("%w: too many wrong tokens from your address (%s); try again in %s", errTooMany, client, wait.Round(time.Second))}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.APIToken)) == 1 {
		s.throttle.succeed(client)
		return nil
	}
	lockout, failures := s.throttle.fail(client, now)
	s.metrics().loginFailed(loginWrongToken)
	s.Logger.Warn("wrong API token", "client", client, "remote", r.RemoteAddr, "via", via)
	if lockout == 0 {
		return fmt.Errorf("%w: wrong API token", errUnauthorized)
	}
	s.Logger.Warn("client locked out after wrong API tokens", "client", client, "failures", failures, "lockout", lockout)
	s.auditLockout(client, failures, lockout, now)
	return &retryError{after: lockout, err: fmt.Errorf("%w: wrong API token; too many from your address (%s), locked out for %s", errUnauthorized, client, lockout)}
}

// auditLockout records a lockout in the cluster's audit trail, in the
// background (it is a Raft entry, and the client need not wait for it),
// unless this node has proposed too many lately (see auditLimiter).
func (s *Server) auditLockout(client string, failures int, lockout time.Duration, now time.Time) {
	ok, leftOut := s.audits.allow(now)
	if !ok {
		s.Logger.Warn("lockout not written to the audit trail: too many lately; the next entry counts it", "client", client)
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
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		return
	}
	s.auditQueue = append(s.auditQueue, pendingAudit{client: client, node: s.Cluster.ID(), detail: detail})
	if s.auditWriting {
		return
	}
	s.auditWriting = true
	s.background.Add(1)
	go s.writeAudits()
}

// pendingAudit is a lockout waiting to be written to the audit trail.
type pendingAudit struct{ client, node, detail string }

// writeAudits proposes the queued lockouts one by one until none is left.
func (s *Server) writeAudits() {
	defer s.background.Done()
	base := s.baseCtx
	if base == nil {
		base = context.Background()
	}
	for {
		s.bgMu.Lock()
		if len(s.auditQueue) == 0 {
			s.auditWriting = false
			s.bgMu.Unlock()
			return
		}
		a := s.auditQueue[0]
		s.auditQueue = s.auditQueue[1:]
		s.bgMu.Unlock()
		ctx, cancel := context.WithTimeout(base, 30*time.Second)
		if err := s.Scheduler.Audit(ctx, jobs.EventLoginFailed, a.node, a.detail); err != nil {
			s.Logger.Warn("lockout not written to the audit trail", "client", a.client, "err", err)
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

// localPath returns p if it is a plain absolute path on this server,
// else "/": the only places login's next= and a form's back= may send a
// browser. It refuses, in p and in p with its escapes decoded once:
// control characters (browsers drop a tab or newline, so "/\t/host"
// becomes "//host", another host), backslashes (read as "/"), a leading
// "//", and anything with a scheme, a host or user info.
func localPath(p string) string {
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

type loginPage struct {
	pageBase
	Next  string
	Error string
}

func (s *Server) handleLoginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login.html", &loginPage{pageBase: s.base(r, "Log in", ""), Next: localPath(r.URL.Query().Get("next"))})
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	formErr := r.ParseForm()
	page := &loginPage{pageBase: s.base(r, "Log in", ""), Next: localPath(r.PostFormValue("next"))}
	code := http.StatusOK
	switch err := crossOrigin.Check(r); {
	case err != nil:
		code, page.Error = http.StatusForbidden, "a login from another site is refused"
	case formErr != nil:
		// Not a wrong token: nothing was presented.
		code, page.Error = http.StatusBadRequest, "cannot read the login form: "+formErr.Error()
	case s.APIToken == "":
		code, page.Error = http.StatusBadRequest, "this node has no API token (api.token): there is nothing to log in to"
	default:
		err := s.checkToken(r, r.PostFormValue("token"), "login")
		if err == nil {
			http.SetCookie(w, &http.Cookie{
				Name: sessionCookie, Value: s.newSession(s.Clock.Now()), Path: "/",
				MaxAge: int(sessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
			})
			http.Redirect(w, r, page.Next, http.StatusSeeOther)
			return
		}
		code = statusOf(err)
		page.Error = strings.Replace(err.Error(), "wrong API token", "wrong token", 1)
		if _, msg, ok := strings.Cut(page.Error, ": "); ok {
			page.Error = msg // without the status word
		}
		var re *retryError
		if errors.As(err, &re) {
			w.Header().Set("Retry-After", retryAfter(re.after))
		}
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fencecron"`)
	}
	s.render(w, r, code, "login.html", page)
}

// handleLogout ends the browser's session on the server, so its cookie
// authorizes nothing from now on, wherever a copy of it is, and clears
// the cookie.
func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	if err := crossOrigin.Check(r); err != nil {
		s.error(w, r, fmt.Errorf("%w: a logout from another site is refused", errForbidden))
		return
	}
	if nonce := s.sessionNonce(r); nonce != "" {
		s.sessions.remove(nonce)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

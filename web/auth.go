package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Who may change things through the public API and the dashboard.
//
//   - ReadOnly refuses every mutating public endpoint with 403.
//   - With an APIToken, a mutating request must carry it as
//     "Authorization: Bearer TOKEN" (the CLI), or come from a browser that
//     logged in at /login (a signed session cookie) and echo that session's
//     CSRF token in the X-Fencecron-CSRF header or a csrf form field.
//   - Without one, anyone who reaches the port may act.
//
// In every case a browser request from another origin (Sec-Fetch-Site or
// Origin naming another site) is refused, so a page elsewhere cannot make
// a visitor's browser trigger jobs on a node it can reach.

const (
	sessionCookie = "fencecron_session"
	csrfHeader    = "X-Fencecron-CSRF"
	csrfField     = "csrf"
	sessionTTL    = 12 * time.Hour
)

// auth is what a page knows about the request's right to act.
type auth struct {
	// Required: the node has an API token. LoggedIn: this browser holds a
	// valid session. ReadOnly: nothing can be changed here.
	Required, LoggedIn, ReadOnly bool
	// CanAct: buttons work for this request. CSRF is its form token.
	CanAct bool
	CSRF   string
}

// sessionKey derives the key sessions are signed with from the API token,
// so changing the token ends every session.
func (s *Server) sessionKey() []byte {
	m := hmac.New(sha256.New, []byte(s.APIToken))
	m.Write([]byte("fencecron dashboard session v1"))
	return m.Sum(nil)
}

func (s *Server) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.sessionKey())
	m.Write([]byte(strings.Join(parts, "|")))
	return hex.EncodeToString(m.Sum(nil))
}

// newSession returns a cookie value: nonce.expiry.mac.
func (s *Server) newSession(now time.Time) string {
	var b [12]byte
	rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	exp := strconv.FormatInt(now.Add(sessionTTL).Unix(), 10)
	return nonce + "." + exp + "." + s.mac("session", nonce, exp)
}

// session returns the request's valid session cookie value, or "".
func (s *Server) session(r *http.Request) string {
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
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || s.Clock.Now().Unix() >= exp {
		return ""
	}
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
	a.CanAct = !a.ReadOnly && (!a.Required || a.LoggedIn)
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
		return nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		got, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.APIToken)) != 1 {
			return fmt.Errorf("%w: wrong API token (the Authorization header must be \"Bearer\" and api.token)", errUnauthorized)
		}
		return nil
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

// localPath returns p if it is a path on this server, else "/".
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || strings.ContainsAny(p, "\r\n") {
		return "/"
	}
	return p
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
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	page := &loginPage{pageBase: s.base(r, "Log in", ""), Next: localPath(r.PostFormValue("next"))}
	code := http.StatusOK
	switch err := crossOrigin.Check(r); {
	case err != nil:
		code, page.Error = http.StatusForbidden, "a login from another site is refused"
	case s.APIToken == "":
		code, page.Error = http.StatusBadRequest, "this node has no API token (api.token): there is nothing to log in to"
	case subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(s.APIToken)) != 1:
		code, page.Error = http.StatusUnauthorized, "wrong token"
	default:
		http.SetCookie(w, &http.Cookie{
			Name: sessionCookie, Value: s.newSession(s.Clock.Now()), Path: "/",
			MaxAge: int(sessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
		})
		http.Redirect(w, r, page.Next, http.StatusSeeOther)
		return
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fencecron"`)
	}
	s.render(w, r, code, "login.html", page)
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	if err := crossOrigin.Check(r); err != nil {
		s.error(w, r, fmt.Errorf("%w: a logout from another site is refused", errForbidden))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

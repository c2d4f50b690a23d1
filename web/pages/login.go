package pages

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/api"
	"github.com/fencecron/fencecron/web/auth"
)

// The login form: a browser trades the API token, or with ACLs on an
// access token, for a session (auth.Guard), so the dashboard's buttons
// work without a header.

type loginPage struct {
	pageBase
	Next  string
	Error string
	// ACL: access control is on, so ACL tokens log in too.
	ACL bool
}

func (s *Dashboard) handleLoginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login.html", &loginPage{pageBase: s.base(r, "Log in", ""), Next: auth.LocalPath(r.URL.Query().Get("next")), ACL: s.Guard.ACLEnabled()})
}

func (s *Dashboard) handleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, auth.MaxLoginBody)
	formErr := r.ParseForm()
	page := &loginPage{pageBase: s.base(r, "Log in", ""), Next: auth.LocalPath(r.PostFormValue("next")), ACL: s.Guard.ACLEnabled()}
	code := http.StatusOK
	switch err := auth.CrossOrigin(r); {
	case err != nil:
		code, page.Error = http.StatusForbidden, "a login from another site is refused"
	case formErr != nil:
		// Not a wrong token: nothing was presented.
		code, page.Error = http.StatusBadRequest, "cannot read the login form: "+formErr.Error()
	case !s.Guard.CanLogIn():
		code, page.Error = http.StatusBadRequest, "this node has no API token (api.token): there is nothing to log in to"
	default:
		err := s.Guard.Login(w, r, r.PostFormValue("token"))
		if err == nil {
			http.Redirect(w, r, page.Next, http.StatusSeeOther)
			return
		}
		code = api.StatusOf(err)
		page.Error = strings.Replace(err.Error(), "wrong API token", "wrong token", 1)
		if _, msg, ok := strings.Cut(page.Error, ": "); ok {
			page.Error = msg // without the status word
		}
		api.SetRetryAfter(w, err)
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fencecron"`)
	}
	s.render(w, r, code, "login.html", page)
}

// handleLogout ends the browser's session (auth.Guard.Logout).
func (s *Dashboard) handleLogout(w http.ResponseWriter, r *http.Request) {
	if err := auth.CrossOrigin(r); err != nil {
		s.API.Error(w, r, fmt.Errorf("%w: a logout from another site is refused", wire.ErrForbidden))
		return
	}
	s.Guard.Logout(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

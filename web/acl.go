package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/auth"
)

// enforceACL judges every request by the route table (auth.Routes) when
// ACLs are on: it finds the route router would take, its row, the
// caller's identity, and refuses a route without a row, a refused
// credential (401) or a missing capability (403 naming it); a request it
// lets through carries the identity, which lists filter by. With ACLs
// off it lets everything through: the node behaves as before.
func (s *Server) enforceACL(router *chi.Mux) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.guard.ACLEnabled() {
				next.ServeHTTP(w, r)
				return
			}
			rctx := chi.NewRouteContext()
			pattern := router.Find(rctx, r.Method, r.URL.Path)
			if pattern == "" {
				// No route: 404 or 405, as without ACLs.
				next.ServeHTTP(w, r)
				return
			}
			rt, ok := auth.LookupRoute(r.Method, pattern)
			if !ok {
				s.api.Error(w, r, fmt.Errorf("%w: %s %s has no row in the route table, so no one may use it", wire.ErrForbidden, r.Method, pattern))
				return
			}
			id, err := s.guard.Identify(r)
			if err != nil && rt.Cap == acl.CapNone {
				// The login form and health checks need no credential,
				// so a refused one does not keep anyone from them.
				id, err = acl.Identity{Name: "anonymous", Anonymous: true}, nil
			}
			if err == nil {
				err = auth.Authorize(id, rt, r, rctx.URLParam)
			}
			if err != nil {
				if toLogin(r, pattern, id) {
					// A browser without a session (or whose session
					// ended) is sent to log in, then back.
					http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
					return
				}
				s.api.Error(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(auth.WithIdentity(r.Context(), id)))
		})
	}
}

// toLogin says whether a refused request is a browser's visit to a
// dashboard page without a usable session: one that sent no credential
// of its own and either had none or lost it (revoked or expired).
func toLogin(r *http.Request, pattern string, id acl.Identity) bool {
	page := r.Method == http.MethodGet && !strings.HasPrefix(pattern, "/api/") && pattern != "/metrics"
	return page && r.Header.Get("Authorization") == "" && (id.Anonymous || id.Accessor == "")
}

// Package pages is the dashboard: server-rendered HTML pages for people
// (overview, jobs, runs and attempts, the store's keys, events, the
// timeline picture, login), their templates and static files, embedded
// and parsed once. A page renders what web/api reads, through the same
// calls the API answers with, so the two never disagree; the buttons post
// to the API itself.
package pages

import (
	"embed"
	"html/template"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/api"
	"github.com/fencecron/fencecron/web/auth"
	"github.com/fencecron/fencecron/web/metrics"
)

//go:embed templates/*.html templates/*.svg static
var assets embed.FS

// Dashboard serves the pages of one node.
type Dashboard struct {
	// API reads the replicated state and the history, and answers
	// errors (a page's are pages: see RenderError).
	API *api.Server
	// Store is the node's fenced store, read for the Store pages and the
	// timelines.
	Store fencedstore.Store
	// ClockSkew, if set, names the peers whose clocks are off
	// (clockskew.go).
	ClockSkew ClockSkew
	// Guard says what the request may do: the buttons shown, the secrets.
	Guard *auth.Guard
	// Metrics gives the Overview this node's store's decisions.
	Metrics *metrics.Node
	// StoreRemote is the URL of the store another node serves to this
	// one (store.backend: remote), "" when this node's store is its own:
	// the Overview then names that node instead of this node's zeros.
	StoreRemote string

	pages map[string]*template.Template
}

// New returns a dashboard over d's fields with its templates parsed.
func New(d Dashboard) (*Dashboard, error) {
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	d.pages = pages
	return &d, nil
}

// Routes mounts the pages on r.
func (s *Dashboard) Routes(r chi.Router) {
	r.With(s.API.HoldsState).Get("/", s.handleOverview)
	r.With(s.API.HoldsState).Get("/jobs", s.handleJobsPage)
	r.With(s.API.HoldsState).Get("/jobs/{name}", s.handleJobPage)
	r.Get("/store", s.handleStorePage)
	r.Get("/store/*", s.handleKeyPage)
	r.With(s.API.HoldsState).Get("/events", s.handleEventsPage)
	r.With(s.API.HoldsState).Get("/timeline", s.handleTimelinePage)
	r.With(s.API.HoldsState).Get("/timeline.svg", s.handleTimelineSVG)
	r.Get("/attempts/{id}", s.handleAttemptPage)
	r.Get("/login", s.handleLoginForm)
	r.Post("/login", s.handleLogin)
	r.Post("/logout", s.handleLogout)
	r.Handle("/static/*", staticHandler())
}

// RenderError answers err as an error page: api.Server.ErrorPage.
func (s *Dashboard) RenderError(w http.ResponseWriter, r *http.Request, code int, err error) {
	s.renderError(w, r, code, err)
}

// storeNode names the node that serves the store at StoreRemote: the
// member whose HTTP address it is, with the address, or the URL alone.
func (s *Dashboard) storeNode(st wire.Status) string {
	u, err := url.Parse(s.StoreRemote)
	if err != nil || u.Host == "" {
		return s.StoreRemote
	}
	for _, m := range st.Members {
		if m.Meta.HTTPAddr == u.Host {
			return m.Name + " (" + u.Host + ")"
		}
	}
	return u.Host
}

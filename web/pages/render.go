package pages

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/buildinfo"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/web/auth"
)

// The dashboard: server-rendered pages, each templates/layout.html plus
// its own template, parsed once. A page asked for with the header
// X-Fencecron-Fragment: main renders only its <main>; static/app.js
// fetches that whenever /api/v1/events reports a change, so pages stay
// live without reloads and all rendering stays here.

// FragmentHeader asks for a page's <main> alone (static/app.js sends it).
const FragmentHeader = "X-Fencecron-Fragment"

var pageNames = []string{"overview.html", "jobs.html", "job.html", "store.html", "key.html", "events.html", "timeline.html", "login.html", "error.html", "attempt.html"}

var templateFuncs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	// tsMilli is ts to the millisecond: decisions on one key often come
	// within a second of each other.
	"tsMilli": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("15:04:05.000")
	},
	"inZone": func(t time.Time, tz string) string {
		if loc, err := jobs.LoadZone(tz); err == nil && tz != "" && tz != "UTC" {
			return t.In(loc).Format("2006-01-02 15:04:05 MST")
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"dur": jobs.ShowDuration,
	"latest": func(r jobs.Run) *jobs.Attempt {
		a, _ := r.Latest()
		return a
	},
	"words":   describeSchedule,
	"keyPath": keyPath,
	"f":       func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"add":     func(a, b float64) float64 { return a + b },
	"add1":    func(i int) int { return i + 1 },
	// released reports whether an operator released the attempt
	// (fencecron release): its error starts with who did.
	"released": func(a jobs.Attempt) bool { return a.Expired && strings.HasPrefix(a.Error, fsm.ReleasedPrefix) },
	"sub":      func(a, b float64) float64 { return a - b },
	"refused":  func(o fencedstore.Outcome) bool { return !o.Accepted() || o == fencedstore.Conflict },
	"deref": func(p *int) string {
		if p == nil {
			return ""
		}
		return strconv.Itoa(*p)
	},
	"join": strings.Join,
	// clip shortens s to about n bytes for a list, where a long command
	// would make one row of a page the size of a script.
	"clip": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + "…"
	},
	"skew": func(d time.Duration) string {
		return strconv.FormatFloat(math.Abs(d.Seconds()), 'f', 3, 64) + "s"
	},
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, errors.New("dict: odd number of arguments")
		}
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			k, ok := kv[i].(string)
			if !ok {
				return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
			}
			m[k] = kv[i+1]
		}
		return m, nil
	},
}

// keyPath is the dashboard path of a store key, each segment escaped.
func keyPath(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/store/" + strings.Join(segs, "/")
}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(templateFuncs).ParseFS(assets, "templates/layout.html", "templates/timeline.svg", "templates/"+name)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		out[name] = t
	}
	svg, err := template.New("timeline.svg").Funcs(templateFuncs).ParseFS(assets, "templates/timeline.svg")
	if err != nil {
		return nil, err
	}
	out["timeline.svg"] = svg
	return out, nil
}

func staticHandler() http.Handler {
	sub, _ := fs.Sub(assets, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// pageBase is what every page shows around its content.
type pageBase struct {
	Title     string
	Nav       string
	Node      string
	RaftState string
	Leader    string
	Epoch     uint64
	Auth      auth.State
	EventSeq  uint64
	Path      string
	Now       time.Time
	Live      bool
	Skew      skewWarning
	Build     string // the footer's: which binary answered, as `fencecron version` names it
}

// build is read once: it cannot change while the process runs.
var build = buildinfo.Get().Short()

func (s *Dashboard) base(r *http.Request, title, nav string) pageBase {
	epoch, _ := s.API.State.Epoch()
	leader, _ := s.API.Cluster.Leader()
	b := pageBase{
		Title: title, Nav: nav, Node: s.API.Cluster.ID(), RaftState: s.API.Cluster.State(), Leader: leader, Epoch: epoch,
		Auth: s.Guard.Of(r), Path: r.URL.RequestURI(), Now: s.API.Clock.Now(), Live: nav != "",
		Skew: s.skewWarning(), Build: build,
	}
	if last := s.API.StateFor(r).Events(0, 1); len(last) == 1 {
		b.EventSeq = last[0].Seq
	}
	return b
}

// render writes a page, or only its main content for a live refresh.
func (s *Dashboard) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	t := s.pages[name]
	root := "layout"
	if r.Header.Get(FragmentHeader) == "main" {
		root = "main"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, root, data); err != nil {
		s.API.Logger.Error("render page", "page", name, "err", err)
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; form-action 'self'")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

type errorPage struct {
	pageBase
	Code    int
	Status  string
	Message string
}

func (s *Dashboard) renderError(w http.ResponseWriter, r *http.Request, code int, err error) {
	p := &errorPage{pageBase: s.base(r, http.StatusText(code), ""), Code: code, Status: http.StatusText(code), Message: err.Error()}
	s.render(w, r, code, "error.html", p)
}

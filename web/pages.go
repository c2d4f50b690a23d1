package web

import (
	"html/template"
	"net/http"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

var templateFuncs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"latest": func(r jobs.Run) *jobs.Attempt {
		a, _ := r.Latest()
		return a
	},
}

type indexPage struct {
	Status Status
	Jobs   []Job
	Runs   []jobs.Run
}

func (s *Server) handleIndex(w http.ResponseWriter, r *http.Request) {
	page := indexPage{Status: s.status(), Jobs: s.jobs(), Runs: s.State.Runs(scheduler.RunFilter{Limit: 25})}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.pages.ExecuteTemplate(w, "index.html", page); err != nil {
		s.Logger.Error("render index", "err", err)
	}
}

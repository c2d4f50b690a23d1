package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/api"
	"github.com/fencecron/fencecron/web/auth"
	"github.com/fencecron/fencecron/web/metrics"
)

// The dashboard: server-rendered pages, each templates/layout.html plus
// its own template, parsed once. A page asked for with the header
// X-Fencecron-Fragment: main renders only its <main>; static/app.js
// fetches that whenever /api/v1/events reports a change, so pages stay
// live without reloads and all rendering stays here.

const fragmentHeader = "X-Fencecron-Fragment"

var pageNames = []string{"overview.html", "jobs.html", "job.html", "store.html", "key.html", "events.html", "timeline.html", "login.html", "error.html", "attempt.html"}

var templateFuncs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
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
	"released": func(a jobs.Attempt) bool { return a.Expired && strings.HasPrefix(a.Error, scheduler.ReleasedPrefix) },
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
}

func (s *Server) base(r *http.Request, title, nav string) pageBase {
	epoch, _ := s.State.Epoch()
	leader, _ := s.Cluster.Leader()
	b := pageBase{
		Title: title, Nav: nav, Node: s.Cluster.ID(), RaftState: s.Cluster.State(), Leader: leader, Epoch: epoch,
		Auth: s.guard.Of(r), Path: r.URL.RequestURI(), Now: s.Clock.Now(), Live: nav != "",
		Skew: s.skewWarning(),
	}
	if last := s.State.Events(0, 1); len(last) == 1 {
		b.EventSeq = last[0].Seq
	}
	return b
}

// render writes a page, or only its main content for a live refresh.
func (s *Server) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	t := s.pages[name]
	root := "layout"
	if r.Header.Get(fragmentHeader) == "main" {
		root = "main"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, root, data); err != nil {
		s.Logger.Error("render page", "page", name, "err", err)
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

func (s *Server) renderError(w http.ResponseWriter, r *http.Request, code int, err error) {
	p := &errorPage{pageBase: s.base(r, http.StatusText(code), ""), Code: code, Status: http.StatusText(code), Message: err.Error()}
	s.render(w, r, code, "error.html", p)
}

// runsByState counts the kept runs by state, in a fixed order.
type stateCount struct {
	State jobs.State
	N     int
}

type overviewPage struct {
	pageBase
	Status    wire.Status
	RunsBy    []stateCount
	TotalRuns int
	Counters  map[string]uint64
	// StoreDecisions are this node's store's, by outcome.
	StoreDecisions []metrics.OutcomeCount
	Failovers      uint64
	Runs           []jobs.Run
	Events         []jobs.Event
	Jobs           int
	JobsPaused     int
	// Groups are the concurrency groups with their queues (groups.go).
	Groups []api.GroupView
	// NoticesPending counts the notifications pending, on a node that
	// does not lead (the leader shows their targets instead).
	NoticesPending int
}

func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request) {
	p := &overviewPage{pageBase: s.base(r, "Overview", "overview"), Status: s.api.Status(), Counters: s.State.Counters(), StoreDecisions: s.Metrics.StoreDecisions()}
	// Counters the cluster never counted yet are zero, not blank.
	for _, c := range clusterCounters {
		if _, ok := p.Counters[c.key]; !ok {
			p.Counters[c.key] = 0
		}
	}
	by := map[jobs.State]int{}
	all := s.State.Runs(scheduler.RunFilter{})
	for _, run := range all {
		by[run.State]++
	}
	p.TotalRuns = len(all)
	for _, st := range api.RunStates {
		p.RunsBy = append(p.RunsBy, stateCount{st, by[st]})
	}
	if e := p.Counters["elections"]; e > 1 {
		p.Failovers = e - 1
	}
	p.Runs = all[:min(len(all), 12)]
	p.Events = newestFirst(s.State.Events(0, 12))
	p.Jobs, p.JobsPaused = p.Status.Jobs.Count, p.Status.Jobs.Paused
	p.Groups = s.api.Groups()
	if p.Status.Notify == nil {
		p.NoticesPending = s.api.PendingNotices()
	}
	s.render(w, r, http.StatusOK, "overview.html", p)
}

func newestFirst(evs []jobs.Event) []jobs.Event {
	slices.Reverse(evs)
	return evs
}

// jobView is a job as the jobs pages show it.
type jobView struct {
	wire.Job
	Words       []string
	NextFires   []time.Time
	ScheduleErr string
}

func (s *Server) jobView(j wire.Job) jobView {
	v := jobView{Job: j}
	for _, e := range j.Schedules {
		v.Words = append(v.Words, describeSchedule(e))
	}
	// A paused job fires at none of its fire times: the page says
	// paused instead of listing them.
	if sched, err := j.Spec.Schedule(); err == nil && !j.Spec.Paused {
		v.NextFires = sched.NextN(s.Clock.Now(), 5)
	} else if err != nil {
		v.ScheduleErr = err.Error()
	}
	return v
}

// timelinePickerJobs bounds the jobs the Timeline page's picker lists.
const timelinePickerJobs = 500

// jobsPageSize is how many jobs one Jobs page shows: with each job's next
// five fire times, well under 1 MiB however long the set.
const jobsPageSize = 100

type jobsPage struct {
	pageBase
	Jobs []jobView
	// The search (q, state) as asked, to fill the form and the links.
	Q, State string
	States   []jobs.State
	// Matched and Total count the jobs that match and the whole set.
	Matched, Total int
	// Next is the link to the next page; First to the first, when this
	// is not it.
	Next, First string
}

func (s *Server) handleJobsPage(w http.ResponseWriter, r *http.Request) {
	q, err := api.JobQuery(r, jobsPageSize)
	if err != nil {
		s.api.Error(w, r, err)
		return
	}
	q.Limit = min(q.Limit, jobsPageSize)
	full, err := s.guard.SeesSecrets(r)
	if err != nil {
		s.api.Error(w, r, err)
		return
	}
	list, next, page := s.api.FindJobs(q, full)
	p := &jobsPage{pageBase: s.base(r, "Jobs", "jobs"), Q: q.Text, State: string(q.State), Matched: page.Matched, Total: page.Total,
		States: append([]jobs.State{scheduler.NeverRan}, api.RunStates...)}
	for _, j := range list {
		p.Jobs = append(p.Jobs, s.jobView(j))
	}
	search := url.Values{}
	if q.Text != "" {
		search.Set("q", q.Text)
	}
	if q.State != "" {
		search.Set("state", string(q.State))
	}
	if q.Paused {
		search.Set("paused", "true")
	}
	if next != "" {
		v := maps.Clone(search)
		v.Set("cursor", next)
		p.Next = "/jobs?" + v.Encode()
	}
	if q.After != "" {
		p.First = "/jobs"
		if len(search) > 0 {
			p.First += "?" + search.Encode()
		}
	}
	s.render(w, r, http.StatusOK, "jobs.html", p)
}

type jobPage struct {
	pageBase
	Job  jobView
	Runs []jobs.Run
	// Newer and Older link the pages of the job's run history ("": none).
	Newer, Older string
	Skips        []jobs.SkipRange
	Timeline     svgTimeline
}

// Paging the job page: runs per page, and how many pages back the newer
// link remembers (past that it goes to the newest page).
const (
	jobPageRuns   = 50
	maxPagesBack  = 32
	cursorListSep = "."
)

func (s *Server) handleJobPage(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	full, err := s.guard.SeesSecrets(r)
	if err != nil {
		s.api.Error(w, r, err)
		return
	}
	j, err := s.api.Job(name, full)
	if err != nil {
		s.api.Error(w, r, err)
		return
	}
	p := &jobPage{pageBase: s.base(r, "Job "+name, "jobs"), Job: s.jobView(j)}
	// The run history pages with the API's cursor; back holds the cursors
	// of the newer pages, so the newer link can return.
	cursor := r.URL.Query().Get("cursor")
	var back []string
	if b := r.URL.Query().Get("back"); b != "" {
		back = strings.Split(b, cursorListSep)
	}
	page, err := s.api.ListRuns(history.RunQuery{Job: name, Limit: jobPageRuns, Cursor: cursor})
	if err != nil {
		s.api.Error(w, r, err)
		return
	}
	p.Runs = page.Runs
	pageURL := func(cursor string, back []string) string {
		q := url.Values{}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		if len(back) > 0 {
			q.Set("back", strings.Join(back, cursorListSep))
		}
		if len(q) == 0 {
			return "/jobs/" + url.PathEscape(name)
		}
		return "/jobs/" + url.PathEscape(name) + "?" + q.Encode()
	}
	if page.Next != "" {
		older := slices.Clone(back)
		if cursor != "" {
			older = append(older, cursor)
		}
		if len(older) > maxPagesBack {
			older = older[len(older)-maxPagesBack:]
		}
		p.Older = pageURL(page.Next, older)
	}
	switch {
	case cursor == "":
	case len(back) == 0:
		p.Newer = pageURL("", nil)
	default:
		p.Newer = pageURL(back[len(back)-1], back[:len(back)-1])
	}
	p.Skips = s.State.Skips(name)
	p.Timeline = s.jobTimeline(r.Context(), name, 8)
	s.render(w, r, http.StatusOK, "job.html", p)
}

// jobTimeline draws a job's last n runs with their keys' store decisions.
func (s *Server) jobTimeline(ctx context.Context, job string, n int) svgTimeline {
	runs := s.State.Runs(scheduler.RunFilter{Job: job, Limit: n})
	title := fmt.Sprintf("job %s: the last %d runs", job, len(runs))
	switch len(runs) {
	case 0:
		title = fmt.Sprintf("job %s: no runs yet", job)
	case 1:
		title = fmt.Sprintf("job %s: the last run", job)
	}
	if chain := s.ancestors(runs); len(chain) > 0 {
		title += fmt.Sprintf(", with the %d runs they followed", len(chain))
		runs = append(runs, chain...)
	}
	d := timelineData{Title: title, Runs: runs, Events: s.State.Events(0, 0), Now: s.Clock.Now()}
	seen := map[string]bool{}
	for _, r := range runs {
		if r.Output == "" || seen[r.Output] {
			continue
		}
		seen[r.Output] = true
		hist, err := s.Store.History(ctx, r.Output)
		if err != nil {
			continue // not written yet, or the store is away: draw the runs
		}
		for _, dec := range hist {
			d.Decisions = append(d.Decisions, keyedDecision{Key: r.Output, Decision: dec})
		}
	}
	return layoutTimeline(d)
}

// keyTimeline draws a key's store decisions with the runs that wrote it.
func (s *Server) keyTimeline(ctx context.Context, key string) (svgTimeline, error) {
	hist, err := s.Store.History(ctx, key)
	if err != nil {
		return svgTimeline{}, err
	}
	d := timelineData{Title: "key " + key, Events: s.State.Events(0, 0), Now: s.Clock.Now()}
	for _, run := range s.State.Runs(scheduler.RunFilter{}) {
		if run.Output == key {
			d.Runs = append(d.Runs, run)
		}
	}
	for _, dec := range hist {
		d.Decisions = append(d.Decisions, keyedDecision{Key: key, Decision: dec})
	}
	return layoutTimeline(d), nil
}

type storePage struct {
	pageBase
	Prefix string
	Keys   []fencedstore.Meta
	Error  string
	// Next is the URL of the next page; First that of the first, when
	// this is not it.
	Next, First string
}

// storePageKeys is how many keys one Store page shows.
const storePageKeys = 100

// handleStorePage shows one page of keys under a prefix, in key order:
// one bounded range read, never the whole store (a busy store has keys by
// the hundred thousand). The cursor is the API's (GET /api/v1/store).
func (s *Server) handleStorePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := &storePage{pageBase: s.base(r, "Store", "store"), Prefix: q.Get("prefix")}
	if err := fencedstore.ValidatePrefix(p.Prefix); err != nil {
		s.api.Error(w, r, api.BadRequest("prefix %q: %v", p.Prefix, err))
		return
	}
	after, err := fencedstore.DecodeCursor(p.Prefix, q.Get("cursor"))
	if err != nil {
		s.api.Error(w, r, api.BadRequest("%v", err))
		return
	}
	page, err := fencedstore.ListPage(r.Context(), s.Store, p.Prefix, after, storePageKeys)
	if err != nil {
		p.Error = err.Error()
	}
	p.Keys = page.Keys
	link := func(cursor string) string {
		v := url.Values{}
		if p.Prefix != "" {
			v.Set("prefix", p.Prefix)
		}
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		if len(v) == 0 {
			return "/store"
		}
		return "/store?" + v.Encode()
	}
	if page.Next != "" {
		p.Next = link(fencedstore.EncodeCursor(p.Prefix, page.Next))
	}
	if after != "" {
		p.First = link("")
	}
	s.render(w, r, http.StatusOK, "store.html", p)
}

type keyPage struct {
	pageBase
	Key      string
	Meta     *fencedstore.Meta
	Body     string
	BodyNote string
	History  []fencedstore.Decision
	Refused  int
	Timeline svgTimeline
	// Earlier are the versions before the current one the page links to
	// (the store answers 404 for one it no longer keeps).
	Earlier []uint64
}

// maxEarlierLinks bounds the links to earlier versions on a key's page.
const maxEarlierLinks = 5

// maxPreview bounds the body shown on a key's page.
const maxPreview = 8 << 10

func (s *Server) handleKeyPage(w http.ResponseWriter, r *http.Request) {
	key := chi.URLParam(r, "*")
	if k, err := url.PathUnescape(key); err == nil {
		key = k
	}
	if err := fencedstore.ValidateKey(key); err != nil {
		s.api.Error(w, r, api.BadRequest("key %q: %v", key, err))
		return
	}
	p := &keyPage{pageBase: s.base(r, "Key "+key, "store"), Key: key}
	hist, err := s.Store.History(r.Context(), key)
	if err != nil {
		s.api.Error(w, r, fmt.Errorf("history of %s: %w", key, err))
		return
	}
	slices.Reverse(hist)
	p.History = hist
	for _, d := range hist {
		if !d.Outcome.Accepted() {
			p.Refused++
		}
	}
	if obj, err := s.Store.Get(r.Context(), key); err == nil {
		p.Meta = &obj.Meta
		for v := obj.Version - 1; v >= 1 && len(p.Earlier) < maxEarlierLinks; v-- {
			p.Earlier = append(p.Earlier, v)
		}
		body := obj.Body
		if len(body) > maxPreview {
			body, p.BodyNote = body[:maxPreview], fmt.Sprintf("the first %d of %d bytes", maxPreview, len(obj.Body))
		}
		if utf8.Valid(body) {
			p.Body = string(body)
		} else {
			p.BodyNote = fmt.Sprintf("%d bytes of binary data", len(obj.Body))
		}
	}
	p.Timeline, _ = s.keyTimeline(r.Context(), key)
	s.render(w, r, http.StatusOK, "key.html", p)
}

type eventsPage struct {
	pageBase
	Kind, Job string
	Kinds     []string
	Events    []jobs.Event
}

var eventKinds = []string{jobs.EventElected, jobs.EventJobSet, jobs.EventGranted, jobs.EventStarted, jobs.EventCompleted, jobs.EventFenced,
	jobs.EventExpired, jobs.EventSuspect, jobs.EventLost, jobs.EventSkipped, jobs.EventCancelled, jobs.EventPaused, jobs.EventResumed,
	jobs.EventGrantRefused, jobs.EventLoginFailed, jobs.EventReleased, jobs.EventWaiting, jobs.EventAdmitted}

func (s *Server) handleEventsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := &eventsPage{pageBase: s.base(r, "Events", "events"), Kind: q.Get("kind"), Job: q.Get("job"), Kinds: eventKinds}
	if p.Kind != "" && !slices.Contains(eventKinds, p.Kind) {
		s.api.Error(w, r, api.BadRequest("kind %q: want one of %s", p.Kind, strings.Join(eventKinds, ", ")))
		return
	}
	for _, e := range newestFirst(s.State.Events(0, 0)) {
		if (p.Kind == "" || e.Kind == p.Kind) && (p.Job == "" || e.Job == p.Job) {
			p.Events = append(p.Events, e)
			if len(p.Events) == 500 {
				break
			}
		}
	}
	s.render(w, r, http.StatusOK, "events.html", p)
}

type timelinePage struct {
	pageBase
	Job, Key string
	Runs     int
	Jobs     []string
	Timeline svgTimeline
	SVGPath  string
}

// timelineFor reads ?job=NAME&runs=N or ?key=KEY (default: the first job).
func (s *Server) timelineFor(r *http.Request) (job, key string, n int, tl svgTimeline, err error) {
	q := r.URL.Query()
	job, key, n = q.Get("job"), q.Get("key"), 8
	if v := q.Get("runs"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 200 {
			return "", "", 0, tl, api.BadRequest("runs must be a number from 1 to 200, got %q", v)
		}
	}
	if job != "" && key != "" {
		return "", "", 0, tl, api.BadRequest("ask for a job or a key, not both")
	}
	if key != "" {
		if err := fencedstore.ValidateKey(key); err != nil {
			return "", "", 0, tl, api.BadRequest("key %q: %v", key, err)
		}
		tl, err = s.keyTimeline(r.Context(), key)
		return job, key, n, tl, err
	}
	if job == "" {
		job = s.State.JobSetInfo().First
	}
	if _, ok := s.State.Spec(job); job != "" && !ok {
		return "", "", 0, tl, fmt.Errorf("job %q: %w", job, jobs.ErrNotFound)
	}
	if job == "" {
		return "", "", n, layoutTimeline(timelineData{Title: "no jobs"}), nil
	}
	return job, key, n, s.jobTimeline(r.Context(), job, n), nil
}

func (s *Server) handleTimelinePage(w http.ResponseWriter, r *http.Request) {
	job, key, n, tl, err := s.timelineFor(r)
	if err != nil {
		s.api.Error(w, r, err)
		return
	}
	p := &timelinePage{pageBase: s.base(r, "Timeline", "timeline"), Job: job, Key: key, Runs: n, Timeline: tl}
	// The picker lists the first jobs by name; any other is one URL away
	// (?job=NAME) and always listed when it is the one shown.
	for _, e := range s.State.FindJobs(scheduler.JobQuery{Limit: timelinePickerJobs}).Jobs {
		p.Jobs = append(p.Jobs, e.Spec.Name)
	}
	if job != "" && !slices.Contains(p.Jobs, job) {
		p.Jobs = append(p.Jobs, job)
	}
	p.SVGPath = "/timeline.svg"
	if r.URL.RawQuery != "" {
		p.SVGPath += "?" + r.URL.RawQuery
	}
	s.render(w, r, http.StatusOK, "timeline.html", p)
}

// handleTimelineSVG serves the picture alone, e.g. for a report or a chat.
func (s *Server) handleTimelineSVG(w http.ResponseWriter, r *http.Request) {
	_, _, _, tl, err := s.timelineFor(r)
	if err != nil {
		s.api.Error(w, r, err)
		return
	}
	var buf bytes.Buffer
	if err := s.pages["timeline.svg"].ExecuteTemplate(&buf, "timeline", tl); err != nil {
		s.api.Error(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n"))
	w.Write(buf.Bytes())
}

type attemptPage struct {
	pageBase
	Run     jobs.Run
	Attempt jobs.Attempt
	Output  scheduler.LiveOutput
	// OutputErr says why the live output could not be read.
	OutputErr string
	// Published is set when the attempt's stdout went to the store.
	Published bool
}

func (s *Server) handleAttemptPage(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	run, a, err := s.api.FindAttempt(id)
	if err != nil {
		s.api.Error(w, r, err)
		return
	}
	p := &attemptPage{pageBase: s.base(r, "Attempt "+id, "jobs"), Run: run, Attempt: a,
		Published: run.Output != "" && a.StoreOutcome == "applied"}
	p.Output, err = s.api.AttemptOutput(r.Context(), a, scheduler.OutputRequest{Attempt: id})
	if err != nil {
		p.OutputErr = err.Error()
		p.Output = scheduler.RecordedOutput(a)
	}
	s.render(w, r, http.StatusOK, "attempt.html", p)
}

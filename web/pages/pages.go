package pages

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/api"
	"github.com/fencecron/fencecron/web/metrics"
)

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
	// StoreDecisions are this node's store's, by outcome; StoreBy names
	// the node that serves the store when it is not this one, whose
	// figures those are (this node decides none).
	StoreDecisions []metrics.OutcomeCount
	StoreBy        string
	Failovers      uint64
	Runs           []jobs.Run
	Events         []jobs.Event
	Jobs           int
	JobsPaused     int
	// Groups are the concurrency groups with their queues (api/groups.go).
	Groups []api.GroupView
	// NoticesPending counts the notifications pending, on a node that
	// does not lead (the leader shows their targets instead).
	NoticesPending int
}

// overviewCounters are the replicated counters overview.html shows.
var overviewCounters = []string{"grants", "expiries", "fenced", "stale_refused", "suspect", "lost", "skipped"}

func (s *Dashboard) handleOverview(w http.ResponseWriter, r *http.Request) {
	p := &overviewPage{pageBase: s.base(r, "Overview", "overview"), Status: s.API.Status(), Counters: s.API.State.Counters(), StoreDecisions: s.Metrics.StoreDecisions()}
	if s.StoreRemote != "" {
		p.StoreBy = s.storeNode(p.Status)
	}
	// Counters the cluster never counted yet are zero, not blank (a
	// template shows a missing key as "<no value>").
	for _, key := range overviewCounters {
		if _, ok := p.Counters[key]; !ok {
			p.Counters[key] = 0
		}
	}
	by := map[jobs.State]int{}
	all := s.API.StateFor(r).Runs(fsm.RunFilter{})
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
	p.Events = newestFirst(s.API.StateFor(r).Events(0, 12))
	p.Jobs, p.JobsPaused = p.Status.Jobs.Count, p.Status.Jobs.Paused
	p.Groups = s.API.GroupsFor(r)
	if p.Status.Notify == nil {
		p.NoticesPending = s.API.PendingNotices()
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

func (s *Dashboard) jobView(j wire.Job) jobView {
	v := jobView{Job: j}
	for _, e := range j.Schedules {
		v.Words = append(v.Words, describeSchedule(e))
	}
	// A paused job fires at none of its fire times: the page says
	// paused instead of listing them.
	if sched, err := j.Spec.Schedule(); err == nil && !j.Spec.Paused {
		v.NextFires = sched.NextN(s.API.Clock.Now(), 5)
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

func (s *Dashboard) handleJobsPage(w http.ResponseWriter, r *http.Request) {
	q, err := api.JobQuery(r, jobsPageSize)
	if err != nil {
		s.API.Error(w, r, err)
		return
	}
	q.Limit = min(q.Limit, jobsPageSize)
	full, err := s.Guard.SeesSecrets(r)
	if err != nil {
		s.API.Error(w, r, err)
		return
	}
	list, next, page := s.API.FindJobs(q, full)
	p := &jobsPage{pageBase: s.base(r, "Jobs", "jobs"), Q: q.Text, State: string(q.State), Matched: page.Matched, Total: page.Total,
		States: append([]jobs.State{jobs.NeverRan}, api.RunStates...)}
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
	if q.Namespace != "" {
		search.Set("namespace", q.Namespace)
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

func (s *Dashboard) handleJobPage(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	full, err := s.Guard.SeesSecrets(r)
	if err != nil {
		s.API.Error(w, r, err)
		return
	}
	j, err := s.API.Job(name, full)
	if err != nil {
		s.API.Error(w, r, err)
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
	page, err := s.API.ListRuns(history.RunQuery{Job: name, Limit: jobPageRuns, Cursor: cursor})
	if err != nil {
		s.API.Error(w, r, err)
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
	p.Skips = s.API.StateFor(r).Skips(name)
	p.Timeline = s.jobTimeline(r, name, 8)
	s.render(w, r, http.StatusOK, "job.html", p)
}

// jobTimeline draws a job's last n runs with their keys' store decisions.
func (s *Dashboard) jobTimeline(r *http.Request, job string, n int) svgTimeline {
	ctx := r.Context()
	runs := s.API.StateFor(r).Runs(fsm.RunFilter{Job: job, Limit: n})
	title := fmt.Sprintf("job %s: the last %d runs", job, len(runs))
	switch len(runs) {
	case 0:
		title = fmt.Sprintf("job %s: no runs yet", job)
	case 1:
		title = fmt.Sprintf("job %s: the last run", job)
	}
	if chain := s.ancestors(s.API.StateFor(r), runs); len(chain) > 0 {
		title += fmt.Sprintf(", with the %d runs they followed", len(chain))
		runs = append(runs, chain...)
	}
	d := timelineData{Title: title, Runs: runs, Events: s.API.StateFor(r).Events(0, 0), Now: s.API.Clock.Now()}
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
func (s *Dashboard) keyTimeline(r *http.Request, key string) (svgTimeline, error) {
	ctx := r.Context()
	hist, err := s.Store.History(ctx, key)
	if err != nil {
		return svgTimeline{}, err
	}
	d := timelineData{Title: "key " + key, Events: s.API.StateFor(r).Events(0, 0), Now: s.API.Clock.Now()}
	for _, run := range s.API.StateFor(r).Runs(fsm.RunFilter{}) {
		if run.Output == key {
			d.Runs = append(d.Runs, run)
		}
	}
	for _, dec := range hist {
		d.Decisions = append(d.Decisions, keyedDecision{Key: key, Decision: dec})
	}
	return layoutTimeline(d), nil
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

func (s *Dashboard) handleEventsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := &eventsPage{pageBase: s.base(r, "Events", "events"), Kind: q.Get("kind"), Job: q.Get("job"), Kinds: eventKinds}
	if p.Kind != "" && !slices.Contains(eventKinds, p.Kind) {
		s.API.Error(w, r, api.BadRequest("kind %q: want one of %s", p.Kind, strings.Join(eventKinds, ", ")))
		return
	}
	for _, e := range newestFirst(s.API.StateFor(r).Events(0, 0)) {
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
func (s *Dashboard) timelineFor(r *http.Request) (job, key string, n int, tl svgTimeline, err error) {
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
		tl, err = s.keyTimeline(r, key)
		return job, key, n, tl, err
	}
	if job == "" {
		job = s.API.State.JobSetInfo().First
	}
	if _, ok := s.API.State.Spec(job); job != "" && !ok {
		return "", "", 0, tl, fmt.Errorf("job %q: %w", job, jobs.ErrNotFound)
	}
	if job == "" {
		return "", "", n, layoutTimeline(timelineData{Title: "no jobs"}), nil
	}
	return job, key, n, s.jobTimeline(r, job, n), nil
}

func (s *Dashboard) handleTimelinePage(w http.ResponseWriter, r *http.Request) {
	job, key, n, tl, err := s.timelineFor(r)
	if err != nil {
		s.API.Error(w, r, err)
		return
	}
	p := &timelinePage{pageBase: s.base(r, "Timeline", "timeline"), Job: job, Key: key, Runs: n, Timeline: tl}
	// The picker lists the first jobs by name; any other is one URL away
	// (?job=NAME) and always listed when it is the one shown.
	for _, e := range s.API.StateFor(r).FindJobs(jobs.Query{Limit: timelinePickerJobs}).Jobs {
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
func (s *Dashboard) handleTimelineSVG(w http.ResponseWriter, r *http.Request) {
	_, _, _, tl, err := s.timelineFor(r)
	if err != nil {
		s.API.Error(w, r, err)
		return
	}
	var buf bytes.Buffer
	if err := s.pages["timeline.svg"].ExecuteTemplate(&buf, "timeline", tl); err != nil {
		s.API.Error(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n"))
	w.Write(buf.Bytes())
}

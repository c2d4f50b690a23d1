package jobs

import "strings"

// NeverRan is the Query.State that selects jobs without any run.
const NeverRan State = "never"

// Query selects jobs of a job set, in name order: the search of the API's
// job list and of the dashboard. The replicated state answers it
// (fsm.FindJobs) from its indexes; what a match is, is decided here.
type Query struct {
	// Text, if set, must occur in the job's name or in one of its target
	// tags written key=value, ignoring case.
	Text string
	// State, if set, is the state of the job's newest run (NeverRan: the
	// job has none).
	State State
	// Paused, if set, selects the paused jobs only.
	Paused bool
	// Namespace, if set, selects the jobs of that namespace only
	// (DefaultNamespace: those that name none).
	Namespace string
	// Allow, if set, says which namespaces the asker may read (access
	// control): jobs of any other are left out, as if not in the set.
	Allow func(ns string) bool
	// After, if set, starts the page after the job of that name (a
	// cursor: it need not be in the set any more).
	After string
	// Limit bounds the page (0: no bound).
	Limit int
}

// Listed is one job of a page: its spec, paused flag reflecting pause and
// resume, and its newest run (nil if none).
type Listed struct {
	Spec    Spec
	LastRun *Run
}

// Page is a page of jobs.
type Page struct {
	Jobs []Listed
	// More is set if jobs after the page match too: ask again with
	// After set to the last job's name.
	More bool
	// Matched counts the jobs that match the query, on every page.
	Matched int
	// Total counts the jobs of the set.
	Total int
}

// Filtered reports whether q selects by more than the cursor: if not,
// every job matches and nothing need be looked at.
func (q *Query) Filtered() bool {
	return q.Text != "" || q.State != "" || q.Paused || q.Namespace != "" || q.Allow != nil
}

// Matches reports whether the job of spec s matches q's text, state,
// paused and namespace filters. paused says whether the job is paused (by its spec or
// by an operator); last returns the state of its newest run, ok false if
// it has none, and is called only if q selects by state. text is q.Text
// in lower case and trimmed (SearchText), computed once per search.
func (q *Query) Matches(s *Spec, paused bool, last func() (State, bool), text string) bool {
	if q.Paused && !paused {
		return false
	}
	if q.Namespace != "" && s.NamespaceName() != q.Namespace {
		return false
	}
	if q.Allow != nil && !q.Allow(s.NamespaceName()) {
		return false
	}
	if q.State != "" {
		st, ok := last()
		if q.State == NeverRan {
			if ok {
				return false
			}
		} else if !ok || st != q.State {
			return false
		}
	}
	if text == "" || containsFold(s.Name, text) {
		return true
	}
	for k, v := range s.Target {
		if containsFold(k+"="+v, text) {
			return true
		}
	}
	return false
}

// SearchText is q.Text as Matches takes it.
func (q *Query) SearchText() string { return strings.ToLower(strings.TrimSpace(q.Text)) }

// containsFold reports whether sub (lower case) occurs in s, ignoring
// case; names are most often lower case already, and then nothing is
// allocated.
func containsFold(s, sub string) bool {
	if strings.Contains(s, sub) {
		return true
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
			return strings.Contains(strings.ToLower(s), sub)
		}
	}
	return false
}

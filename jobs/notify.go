package jobs

import (
	"fmt"
	"net/mail"
	"net/url"
	"slices"
	"strings"
)

// Notify is one entry of a job's notify list: the states it is sent on
// and exactly one target.
type Notify struct {
	On      []string `json:"on" yaml:"on"`
	Webhook string   `json:"webhook,omitempty" yaml:"webhook"`
	Slack   string   `json:"slack,omitempty" yaml:"slack"`
	Email   []string `json:"email,omitempty" yaml:"email"`
}

// Notification target kinds (Notify.Kind).
const (
	NotifyWebhook = "webhook"
	NotifySlack   = "slack"
	NotifyEmail   = "email"
)

// NotifyRecovered is the notify state of a run that succeeded after the
// job's previous finished run did not.
const NotifyRecovered = "recovered"

// NotifyStates are the states a notify entry may be sent on: the ends of
// attempts and runs (an attempt that fails with retries left is notified
// too), a run recorded as skipped, and recovered. A run's start is not
// notified: only what ends is.
var NotifyStates = []string{
	string(Succeeded), string(Failed), string(Fenced), string(TimedOut), string(Lost),
	string(Cancelled), string(Skipped), NotifyRecovered,
}

// Events the notifications and dependencies record.
const (
	// EventNotified: a notification was delivered.
	EventNotified = "notified"
	// EventNotifyFailed: a notification was given up on (its target kept
	// refusing, or the queue was full).
	EventNotifyFailed = "notify_failed"
)

// MaxNotify bounds a job's notify list, and MaxAfter its after list.
const (
	MaxNotify = 16
	MaxAfter  = 32
)

// Kind returns the entry's target kind, or "" if it has none or more
// than one.
func (n Notify) Kind() string {
	var kinds []string
	if n.Webhook != "" {
		kinds = append(kinds, NotifyWebhook)
	}
	if n.Slack != "" {
		kinds = append(kinds, NotifySlack)
	}
	if len(n.Email) > 0 {
		kinds = append(kinds, NotifyEmail)
	}
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

// Wants reports whether the entry is sent on state st.
func (n Notify) Wants(st string) bool { return slices.Contains(n.On, st) }

// checkNotify returns the problems of a job's notify list; smtp says
// whether the cluster has an SMTP server configured (Limits.NoSMTP).
func checkNotify(list []Notify, l Limits) []FieldError {
	var errs []FieldError
	bad := func(i int, format string, args ...any) {
		errs = append(errs, FieldError{Field: "notify", Index: i, Msg: fmt.Sprintf(format, args...)})
	}
	if len(list) > MaxNotify {
		bad(-1, "%d entries: at most %d", len(list), MaxNotify)
	}
	for i, n := range list {
		if len(n.On) == 0 {
			bad(i, "on: required: the states to notify, from %s", strings.Join(NotifyStates, ", "))
		}
		for _, st := range n.On {
			if !slices.Contains(NotifyStates, st) {
				bad(i, "on: %q is not a state that is notified: want one of %s", st, strings.Join(NotifyStates, ", "))
			}
		}
		set := 0
		for _, ok := range []bool{n.Webhook != "", n.Slack != "", len(n.Email) > 0} {
			if ok {
				set++
			}
		}
		switch set {
		case 0:
			bad(i, "no target: give one of webhook, slack or email")
			continue
		case 1:
		default:
			bad(i, "give one target per entry (webhook, slack or email), not %d; write another entry for the next", set)
			continue
		}
		switch {
		case n.Webhook != "":
			if err := checkURL(n.Webhook); err != nil {
				bad(i, "webhook: %v", err)
			}
		case n.Slack != "":
			if err := checkURL(n.Slack); err != nil {
				bad(i, "slack: %v", err)
			}
		default:
			if l.NoSMTP {
				bad(i, "email: no SMTP server: set host and from in the top-level notify: section")
			}
			for _, a := range n.Email {
				if _, err := mail.ParseAddress(a); err != nil || strings.ContainsAny(a, "\r\n") {
					bad(i, "email: %q is not an address", clip(a, 80))
				}
			}
		}
	}
	return errs
}

// checkURL accepts an absolute http or https URL with a host.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", clip(s, 80), err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL with a host", clip(s, 80))
	}
	return nil
}

// checkAfter returns the problems of a job's own after list: a name it
// lists must be a job name, not its own, at most once; a job with after
// has no schedule (it runs for its parents' scheduled times).
func checkAfter(s *Spec) []FieldError {
	var errs []FieldError
	if len(s.After) == 0 {
		return nil
	}
	if len(s.After) > MaxAfter {
		errs = append(errs, FieldError{Field: "after", Index: -1, Msg: fmt.Sprintf("%d jobs: at most %d", len(s.After), MaxAfter)})
	}
	if len(s.Schedules) > 0 {
		errs = append(errs, FieldError{Field: "after", Index: -1,
			Msg: "a job with after runs for its parents' scheduled times and has no schedule of its own: remove schedule or after"})
	}
	self := s.QualifiedName()
	for i, p := range s.After {
		_, short := SplitQualified(p)
		switch {
		case s.Resolve(p) == self:
			errs = append(errs, FieldError{Field: "after", Index: i, Msg: fmt.Sprintf("%q: a job cannot follow itself", p)})
		case !dnsLabel(short):
			errs = append(errs, FieldError{Field: "after", Index: i, Msg: fmt.Sprintf("%q is not a job name", clip(p, 80))})
		case s.crossNamespace("after:", p) != "":
			errs = append(errs, FieldError{Field: "after", Index: i, Msg: s.crossNamespace("after:", p)})
		case slices.IndexFunc(s.After, func(q string) bool { return s.Resolve(q) == s.Resolve(p) }) < i:
			errs = append(errs, FieldError{Field: "after", Index: i, Msg: fmt.Sprintf("%q is listed twice", p)})
		}
	}
	return errs
}

// AfterProblem is a problem of a job set's dependencies: the job it
// concerns (by name, and by its place in the set: two jobs may share a
// name in a file being checked), the element of its after list (-1 for
// the list), and what.
type AfterProblem struct {
	Job   string
	Spec  int
	Index int
	Msg   string
}

// HasAfter reports whether a job of specs follows another (after:).
func HasAfter(specs []Spec) bool {
	for i := range specs {
		if len(specs[i].After) > 0 {
			return true
		}
	}
	return false
}

// CheckAfter checks the dependencies between the jobs of a set: every
// name in an after list is a job of the set, and no job follows itself
// through others (a cycle is named as "a → b → a", once, at the job of
// the cycle that comes first in the set).
func CheckAfter(specs []Spec) []AfterProblem {
	if !HasAfter(specs) {
		// Most sets: no problem to find, and no index of 100,000 names
		// to build.
		return nil
	}
	idx := make(map[string]int, len(specs))
	for i := range specs {
		if q := specs[i].QualifiedName(); !hasKey(idx, q) {
			idx[q] = i
		}
	}
	var out []AfterProblem
	for n := range specs {
		s := &specs[n]
		for i, p := range s.After {
			if s.crossNamespace("after:", p) != "" {
				// Spec.Validate reports it.
				continue
			}
			if _, ok := idx[s.Resolve(p)]; !ok && p != "" {
				msg := fmt.Sprintf("%q is not a job of this set", p)
				if ns := s.NamespaceName(); ns != DefaultNamespace {
					msg = fmt.Sprintf("%q is not a job of namespace %s in this set (after: resolves within the job's own namespace)", p, ns)
				}
				out = append(out, AfterProblem{Job: s.Name, Spec: n, Index: i, Msg: msg})
			}
		}
	}
	// Depth-first search over "follows" edges; a back edge closes a cycle.
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(specs))
	var stack []int
	reported := map[string]bool{}
	var visit func(i int)
	visit = func(i int) {
		color[i] = grey
		stack = append(stack, i)
		for k, p := range specs[i].After {
			j, ok := idx[specs[i].Resolve(p)]
			if !ok {
				continue
			}
			switch color[j] {
			case white:
				visit(j)
			case grey:
				start := slices.Index(stack, j)
				members := slices.Clone(stack[start:])
				// Say it in the order jobs run (a parent before the job
				// that follows it), from the cycle's first job in the set.
				slices.Reverse(members)
				first := slices.Index(members, slices.Min(members))
				members = append(members[first:], members[:first]...)
				names := make([]string, 0, len(members)+1)
				for _, n := range members {
					names = append(names, specs[n].Name)
				}
				names = append(names, names[0])
				sorted := slices.Clone(names[:len(names)-1])
				slices.Sort(sorted)
				key := strings.Join(sorted, ",")
				if !reported[key] {
					reported[key] = true
					out = append(out, AfterProblem{Job: specs[i].Name, Spec: i, Index: k,
						Msg: fmt.Sprintf("cycle: %s (a job cannot wait for itself)", strings.Join(names, " → "))})
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
	}
	for i := range specs {
		if color[i] == white {
			visit(i)
		}
	}
	return out
}

// CheckTarget checks the target of a notify entry (its webhook, slack or
// email) as a job's notify list is checked, whatever its on.
func (n Notify) CheckTarget(l Limits) error {
	n.On = []string{NotifyStates[0]}
	if errs := checkNotify([]Notify{n}, l); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

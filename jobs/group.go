package jobs

import (
	"fmt"
	"strings"
)

// Group is a concurrency group (the config's top-level groups): at most
// MaxRunning runs of its jobs hold a place at once across the cluster;
// up to MaxWaiting more wait for one, in fire-time order; a fire time
// beyond that is skipped. A group belongs to a namespace (the default
// one when Namespace is empty) and holds that namespace's jobs that name
// it; its Name, like a job's, is qualified once a job's spec carries it
// (Spec.Normalize).
type Group struct {
	Name       string `json:"name" yaml:"name"`
	Namespace  string `json:"namespace,omitempty" yaml:"namespace"`
	MaxRunning int    `json:"max_running" yaml:"max_running"`
	MaxWaiting int    `json:"max_waiting" yaml:"max_waiting"`
}

// Bounds and defaults of groups.
const (
	// DefaultGroupMaxWaiting is max_waiting when the config leaves it out.
	DefaultGroupMaxWaiting = 100
	// MaxGroupWaiting bounds max_waiting: every waiter is a run every
	// server keeps until it runs.
	MaxGroupWaiting = 10000
	// MaxGroupRunning bounds max_running (no real limit, a sane one).
	MaxGroupRunning = 100000
)

// Check returns what is wrong with g as field problems ("name",
// "max_running", "max_waiting").
func (g Group) Check() []FieldError {
	var errs []FieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Index: -1, Msg: fmt.Sprintf(format, args...)})
	}
	_, _, short, problem := canonicalName(g.Namespace, g.Name)
	switch {
	case g.Namespace != "" && g.Namespace != DefaultNamespace && !ValidNamespace(g.Namespace):
		bad("namespace", "%q: want a DNS label of 1-%d lowercase letters, digits and '-', starting and ending with a letter or digit", clip(g.Namespace, 80), MaxNamespaceLen)
	case g.Name == "":
		bad("name", "required")
	case problem != "":
		bad("name", "%s", problem)
	case len(short) > MaxNameLen || !dnsLabel(short):
		bad("name", "%q is not a DNS label: 1-%d lowercase letters, digits and '-', starting and ending with a letter or digit", short, MaxNameLen)
	}
	if g.MaxRunning < 1 || g.MaxRunning > MaxGroupRunning {
		bad("max_running", "%d: want at least 1 (and at most %d)", g.MaxRunning, MaxGroupRunning)
	}
	if g.MaxWaiting < 0 || g.MaxWaiting > MaxGroupWaiting {
		bad("max_waiting", "%d: want 0 (no waiting: skip when full) to %d", g.MaxWaiting, MaxGroupWaiting)
	}
	return errs
}

// checkGroup is the part of Spec.Validate about its group: a job in a
// group carries the group's limits (the config copies them from its
// groups section), and they are valid.
func (s *Spec) checkGroup() []FieldError {
	switch {
	case s.Group == "" && s.GroupLimits == nil:
		return nil
	case s.Group == "":
		return []FieldError{{Field: "group", Index: -1, Msg: "group_limits given without a group"}}
	case s.crossNamespace("group:", s.Group) != "":
		return []FieldError{{Field: "group", Index: -1, Msg: s.crossNamespace("group:", s.Group)}}
	case s.GroupLimits == nil:
		_, short := SplitQualified(s.Group)
		if ns := s.NamespaceName(); ns != DefaultNamespace {
			return []FieldError{{Field: "group", Index: -1, Msg: fmt.Sprintf("%q is not defined in namespace %s: add it to the top-level groups of the same file (groups: [{name: %s, namespace: %s, max_running: 1}])", s.Group, ns, short, ns)}}
		}
		return []FieldError{{Field: "group", Index: -1, Msg: fmt.Sprintf("%q is not defined: add it to the top-level groups of the same file (groups: [{name: %s, max_running: 1}])", s.Group, s.Group)}}
	case s.GroupLimits.QualifiedName() != s.Resolve(s.Group):
		return []FieldError{{Field: "group", Index: -1, Msg: fmt.Sprintf("%q carries the limits of group %q", s.Group, s.GroupLimits.QualifiedName())}}
	}
	var out []FieldError
	for _, p := range s.GroupLimits.Check() {
		p.Field = "group_limits." + p.Field
		out = append(out, p)
	}
	return out
}

// checkGroups reports groups of a set whose jobs carry different limits.
func checkGroups(specs []Spec) []string {
	first := map[string]*Spec{}
	var problems []string
	for i := range specs {
		s := &specs[i]
		if s.Group == "" || s.GroupLimits == nil {
			continue
		}
		f, ok := first[s.Group]
		if !ok {
			first[s.Group] = s
			continue
		}
		if *f.GroupLimits != *s.GroupLimits {
			problems = append(problems, fmt.Sprintf("group %s: jobs %s and %s carry different limits (%+v, %+v): a group is defined once", s.Group, f.Name, s.Name, *f.GroupLimits, *s.GroupLimits))
		}
	}
	return problems
}

// Groups returns the groups a job set uses, each once, in the order the
// set first names them.
func Groups(specs []*Spec) []Group {
	seen := map[string]bool{}
	var out []Group
	for _, s := range specs {
		if s.GroupLimits != nil && !seen[s.Group] {
			seen[s.Group] = true
			out = append(out, *s.GroupLimits)
		}
	}
	return out
}

// WaitingReason is a waiting run's reason, and the start of the reason of
// a fire time skipped because its group's queue is full.
func WaitingReason(group string) string { return "waiting for group " + group }

// IsWaiting reports whether a run waits for a place in its group: pending,
// no attempt yet, and the waiting reason.
func IsWaiting(r Run) bool {
	return r.State == Pending && len(r.Attempts) == 0 && r.Group != "" && strings.HasPrefix(r.Reason, WaitingReason(r.Group))
}

// QualifiedName returns the group's qualified name: "NS:name" in a
// namespace other than the default one, the plain name in it.
func (g Group) QualifiedName() string {
	_, q, _, _ := canonicalName(g.Namespace, g.Name)
	return q
}

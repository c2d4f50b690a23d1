package jobs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencecron/fencecron/fencedstore"
)

// Namespaces. A job may name a namespace (default DefaultNamespace); job
// names, group names and after: references are resolved within it. A
// job's qualified name is "NS:name" for a namespace NS other than the
// default and the plain name for the default one, so a job without a
// namespace keeps the run ids, store keys and token scopes it always had.
// The qualified name is what the replicated state, run ids and the API
// name a job by: Spec.Normalize puts it in Spec.Name. A namespaced job's
// output keys and token scope lie under "ns/NS/"
// (fencedstore.NamespacePrefix), which no other namespace's token covers.
const (
	// DefaultNamespace is the namespace of a job that names none.
	DefaultNamespace = fencedstore.DefaultNamespace
	// MaxNamespaceLen bounds a namespace's name.
	MaxNamespaceLen = 32
)

// ValidNamespace says whether ns can name a namespace: a DNS label of at
// most MaxNamespaceLen bytes (lowercase letters, digits and '-'), so it
// holds neither the ':' of a qualified name nor the '/' of a key.
func ValidNamespace(ns string) bool { return len(ns) <= MaxNamespaceLen && dnsLabel(ns) }

// QualifiedName returns the qualified name of job name in namespace ns:
// the plain name in the default namespace ("" or DefaultNamespace),
// "ns:name" in any other.
func QualifiedName(ns, name string) string {
	if ns == "" || ns == DefaultNamespace {
		return name
	}
	return ns + fencedstore.NamespaceSep + name
}

// ValidQualifiedName says whether q is a job's qualified name in its
// canonical form: a valid name (ValidName), alone or after a valid
// namespace other than the default one and NamespaceSep.
func ValidQualifiedName(q string) bool {
	ns, name, ok := strings.Cut(q, fencedstore.NamespaceSep)
	if !ok {
		return ValidName(q)
	}
	return ns != DefaultNamespace && ValidNamespace(ns) && ValidName(name)
}

// SplitQualified returns the namespace (DefaultNamespace for a plain
// name) and the name within it of a qualified name.
func SplitQualified(q string) (ns, name string) {
	if ns, name, ok := strings.Cut(q, fencedstore.NamespaceSep); ok {
		if ns == "" {
			ns = DefaultNamespace
		}
		return ns, name
	}
	return DefaultNamespace, q
}

// canonicalName reads a name given with a namespace (either may be
// empty; the name may be qualified already) and returns the canonical
// namespace ("" for the default one), the qualified name and the name
// within the namespace. It returns
// a problem when the two disagree or either is not valid; a plain name's
// own rules (ValidName) are left to the caller.
func canonicalName(ns, name string) (canonNS, qualified, short string, problem string) {
	short = name
	if n, rest, ok := strings.Cut(name, fencedstore.NamespaceSep); ok {
		switch {
		case ns != "" && ns != n:
			problem = fmt.Sprintf("%q is qualified with namespace %q, but namespace is %q", clip(name, 80), n, ns)
		case !ValidNamespace(n):
			problem = fmt.Sprintf("%q: namespace %q is not a DNS label of 1-%d lowercase letters, digits and '-'", clip(name, 80), clip(n, 40), MaxNamespaceLen)
		}
		ns, short = n, rest
	}
	if ns == DefaultNamespace {
		ns = ""
	}
	return ns, QualifiedName(ns, short), short, problem
}

// NamespaceName returns the job's namespace: DefaultNamespace, or the one it
// names (by its field or its qualified name).
func (s *Spec) NamespaceName() string {
	ns, _, _, _ := canonicalName(s.Namespace, s.Name)
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}

// ShortName returns the job's name within its namespace (the name as the
// config file writes it).
func (s *Spec) ShortName() string {
	_, _, short, _ := canonicalName(s.Namespace, s.Name)
	return short
}

// QualifiedName returns the job's qualified name, before or after
// Normalize.
func (s *Spec) QualifiedName() string {
	_, q, _, _ := canonicalName(s.Namespace, s.Name)
	return q
}

// Resolve returns the qualified name of a job (or group) named ref in
// the job's namespace: a plain ref names one of the job's namespace; a
// qualified one names itself (Validate refuses one of another
// namespace).
func (s *Spec) Resolve(ref string) string {
	if ref == "" {
		return ""
	}
	if n, rest, ok := strings.Cut(ref, fencedstore.NamespaceSep); ok {
		return QualifiedName(n, rest)
	}
	return QualifiedName(s.NamespaceName(), ref)
}

// normalizeNamespace puts the job's name, after list and group in their
// qualified form (the default namespace's plainly), and its namespace in
// canonical form ("" for the default one). A name that disagrees with
// the namespace is left as it is, for Validate to report.
func (s *Spec) normalizeNamespace() {
	ns, q, _, problem := canonicalName(s.Namespace, s.Name)
	if problem != "" {
		return
	}
	s.Namespace, s.Name = ns, q
	if ns == "" && len(s.After) == 0 && s.Group == "" {
		return
	}
	// A reference to another namespace stays as written, for Validate
	// to report. The list is copied before it changes: a spec is often a
	// copy whose slices are shared with one others read.
	cloned := false
	for i, p := range s.After {
		if r := s.Resolve(p); r != p && s.crossNamespace("", p) == "" {
			if !cloned {
				s.After, cloned = slices.Clone(s.After), true
			}
			s.After[i] = r
		}
	}
	if s.Group != "" && s.crossNamespace("", s.Group) == "" {
		s.Group = s.Resolve(s.Group)
	}
	if g := s.GroupLimits; g != nil {
		// A copy too, if it changes: the limits are often shared.
		if gns, gq, _, gp := canonicalName(g.Namespace, g.Name); gp == "" && (gns != g.Namespace || gq != g.Name) {
			c := *g
			c.Namespace, c.Name = gns, gq
			s.GroupLimits = &c
		}
	}
}

// checkNamespace is the part of Spec.Validate about the job's namespace
// and name.
func (s *Spec) checkNamespace(errs *fieldErrors) {
	if s.Namespace != "" && s.Namespace != DefaultNamespace && !ValidNamespace(s.Namespace) {
		errs.bad("namespace", -1, "%q: want a DNS label of 1-%d lowercase letters, digits and '-', starting and ending with a letter or digit", clip(s.Namespace, 80), MaxNamespaceLen)
		return
	}
	_, _, short, problem := canonicalName(s.Namespace, s.Name)
	switch {
	case s.Name == "":
		errs.bad("name", -1, "required")
	case problem != "":
		errs.bad("name", -1, "%s", problem)
	case !ValidName(short):
		errs.bad("name", -1, "%q is not a DNS label: 1-%d lowercase letters, digits and '-', starting and ending with a letter or digit", short, MaxNameLen)
	}
}

// crossNamespace says why ref, a job or group a spec names, is refused
// for lying in another namespace than the spec's, or returns "".
func (s *Spec) crossNamespace(what, ref string) string {
	n, _, ok := strings.Cut(ref, fencedstore.NamespaceSep)
	if !ok {
		return ""
	}
	if n == "" {
		n = DefaultNamespace
	}
	if own := s.NamespaceName(); n != own {
		return fmt.Sprintf("%q is in namespace %s, not this job's (%s): %s resolves within the job's own namespace", clip(ref, 80), n, own, what)
	}
	return ""
}

// ReplaceNamespaces returns the job set that next makes of cur when it
// replaces only the jobs of the namespaces replaced accepts: cur's jobs
// of every other namespace, in their order, then next. An apply by a
// token limited to some namespaces makes its set so, on the leader, from
// the set its difference is against.
func ReplaceNamespaces(cur []*Spec, next []Spec, replaced func(ns string) bool) []Spec {
	out := make([]Spec, 0, len(cur)+len(next))
	for i := range cur {
		if !replaced(cur[i].NamespaceName()) {
			out = append(out, *cur[i])
		}
	}
	return append(out, next...)
}

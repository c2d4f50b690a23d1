package jobs

import (
	"sort"
	"strings"

	"github.com/fencecron/fencecron/fencedstore"
)

// OutputPrefix returns the key scope of the job's fence tokens: the literal
// part of the output template up to and including the last "/" before the
// first "{{". Every key the template can render starts with it, so a token
// signed with this scope can publish the job's outputs (and, with
// `fencecron publish`, further keys beside them) and nothing outside.
//
// A job of a namespace other than the default one has its scope under the
// namespace's prefix ("ns/NS/", fencedstore.NamespacePrefix), as its
// output keys are; the store refuses any token a key of another
// namespace than its job's (fencedstore.Scope.Covers).
//
// It is never empty: a scope of "" would cover every key of the store, and
// one job could overwrite any other's outputs. A job without an output, or
// whose template has no literal directory ("{{ .Job }}-{{ .RunID }}.txt",
// "out.csv"), gets "<name>/". Such a job's output key may then lie outside
// its own token's scope (see OutputOutsideScope): the worker still
// publishes its stdout, with a token of its own for exactly that key, but
// the job's own `fencecron publish` to it is refused.
func (s *Spec) OutputPrefix() string {
	ns := fencedstore.NamespacePrefix(s.NamespaceName())
	lit := s.Output
	if i := strings.Index(lit, "{{"); i >= 0 {
		lit = lit[:i]
	}
	if i := strings.LastIndexByte(lit, '/'); i >= 0 {
		return ns + lit[:i+1]
	}
	return ns + s.ShortName() + "/"
}

// OutputOutsideScope reports whether key, one of the job's rendered output
// keys, lies outside the scope of the job's own tokens (OutputPrefix).
func (s *Spec) OutputOutsideScope(key string) bool {
	return key != "" && !strings.HasPrefix(key, s.OutputPrefix())
}

// ScopeOverlap is two jobs whose token scopes overlap: Outer's scope is a
// prefix of (or equal to) Inner's, so Outer's tokens can write Inner's
// keys, and the two share one quota-checked key space.
type ScopeOverlap struct {
	Outer, Inner             string // job names
	OuterPrefix, InnerPrefix string
}

// ScopeOverlaps returns every pair of jobs whose token scopes overlap: one
// scope is a prefix of the other, or they are equal. Each pair is listed
// once, with the job of the wider scope as Outer (for equal scopes, the
// one given first), sorted by Outer, then Inner.
//
// It sorts the scopes, so that every scope that starts with another
// follows it in one run: n log n plus the pairs found, where comparing
// every pair would take minutes for 100,000 jobs.
func ScopeOverlaps(specs []Spec) []ScopeOverlap {
	type scope struct {
		prefix string
		i      int
	}
	scopes := make([]scope, len(specs))
	for i := range specs {
		scopes[i] = scope{specs[i].OutputPrefix(), i}
	}
	sort.Slice(scopes, func(a, b int) bool {
		if scopes[a].prefix != scopes[b].prefix {
			return scopes[a].prefix < scopes[b].prefix
		}
		return scopes[a].i < scopes[b].i
	})
	var out []ScopeOverlap
	for a := range scopes {
		for b := a + 1; b < len(scopes) && strings.HasPrefix(scopes[b].prefix, scopes[a].prefix); b++ {
			outer, inner := scopes[a], scopes[b]
			out = append(out, ScopeOverlap{Outer: specs[outer.i].Name, Inner: specs[inner.i].Name, OuterPrefix: outer.prefix, InnerPrefix: inner.prefix})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Outer != out[j].Outer {
			return out[i].Outer < out[j].Outer
		}
		return out[i].Inner < out[j].Inner
	})
	return out
}

package jobs

import "strings"

// OutputPrefix returns the key scope of the job's fence tokens: the literal
// part of the output template up to and including the last "/" before the
// first "{{". Every key the template can render starts with it, so a token
// signed with this scope can publish the job's outputs (and, with
// `fencecron publish`, further keys beside them) and nothing outside. It is
// "" (every key) when that literal part has no "/": give the template a
// literal directory, as in "reports/{{ ... }}.csv", to narrow the scope.
func (s *Spec) OutputPrefix() string {
	lit := s.Output
	if i := strings.Index(lit, "{{"); i >= 0 {
		lit = lit[:i]
	}
	if i := strings.LastIndexByte(lit, '/'); i >= 0 {
		return lit[:i+1]
	}
	return ""
}

package api

import (
	"net/http"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/web/auth"
)

// Lists are filtered to what the caller may read (access control): a
// token limited to some namespaces sees the jobs, runs, events and skips
// of those alone, as if the others did not exist. With ACLs off nothing
// is filtered.

// readable returns which namespaces the request's caller may read, or
// nil when everything is readable (ACLs off, or a caller who may read
// every namespace).
func readable(r *http.Request) func(ns string) bool {
	id, ok := auth.IdentityOf(r.Context())
	if !ok || id.AllNamespaces(acl.CapRead) {
		return nil
	}
	return func(ns string) bool { return id.Allowed(ns, acl.CapRead) }
}

// StateFor returns the replicated state as the request's caller may read
// it: s.State itself, or a view filtered to the namespaces it may read.
func (s *Server) StateFor(r *http.Request) State {
	allow := readable(r)
	if allow == nil {
		return s.State
	}
	return filteredState{State: s.State, allow: allow}
}

// filteredState is a State that hides the jobs of the namespaces allow
// refuses, with their runs, events and skips.
type filteredState struct {
	State
	allow func(ns string) bool
}

func (f filteredState) job(name string) bool { return f.allow(fencedstore.JobNamespace(name)) }

func (f filteredState) FindJobs(q jobs.Query) jobs.Page {
	q.Allow = f.allow
	return f.State.FindJobs(q)
}

func (f filteredState) Spec(name string) (jobs.Spec, bool) {
	if !f.job(name) {
		return jobs.Spec{}, false
	}
	return f.State.Spec(name)
}

func (f filteredState) Runs(rf fsm.RunFilter) []jobs.Run {
	if rf.Job != "" && !f.job(rf.Job) {
		return nil
	}
	return readableOf(f, f.State.Runs(rf), func(r jobs.Run) string { return r.Job })
}

func (f filteredState) LastRun(job string) (jobs.Run, bool) {
	if !f.job(job) {
		return jobs.Run{}, false
	}
	return f.State.LastRun(job)
}

func (f filteredState) Events(after uint64, limit int) []jobs.Event {
	return filterEvents(f.State.Events(after, limit), f.allow)
}

func (f filteredState) Skips(job string) []jobs.SkipRange {
	return readableOf(f, f.State.Skips(job), func(sk jobs.SkipRange) string { return sk.Job })
}

// readableOf returns, in a new slice, the items of all whose job (named
// by job) f may read.
func readableOf[T any](f filteredState, all []T, job func(T) string) []T {
	out := all[:0:0]
	for _, x := range all {
		if f.job(job(x)) {
			out = append(out, x)
		}
	}
	return out
}

// filterEvents keeps the events of no job and those of the jobs of the
// namespaces allow accepts (allow nil: all).
func filterEvents(evs []jobs.Event, allow func(ns string) bool) []jobs.Event {
	if allow == nil {
		return evs
	}
	out := evs[:0:0]
	for _, e := range evs {
		if history.EventReadable(e, allow) {
			out = append(out, e)
		}
	}
	return out
}

// applyScope is what an apply of specs by the request's caller replaces:
// the whole set (nil) for a caller who may apply every namespace (or
// with ACLs off); for one limited to some namespaces, the globs of those
// namespaces, whose jobs alone specs replace: the leader keeps every
// other namespace's jobs as they are when it applies. A job of a
// namespace the caller may not apply is refused (403 naming it), and
// nothing is applied.
func applyScope(r *http.Request, specs []jobs.Spec) ([]string, error) {
	scope, limited := exportScope(r)
	if !limited {
		return nil, nil
	}
	id, _ := auth.IdentityOf(r.Context())
	if len(scope) == 0 {
		// Never an empty scope: the leader would read it as the whole set.
		return nil, &auth.Denied{Cap: acl.CapApply, Namespace: "any namespace", Who: auth.Describe(id)}
	}
	for i := range specs {
		if ns := specNamespace(&specs[i]); !id.Allowed(ns, acl.CapApply) {
			return nil, &auth.Denied{Cap: acl.CapApply, Namespace: ns + " (job " + specs[i].Name + ")", Who: auth.Describe(id)}
		}
	}
	return scope, nil
}

// exportScope is the part of the job set the request's caller may
// export and replace: the whole set (limited false: ACLs off, where
// SeesSecrets decides, or a caller who may apply every namespace), else
// the globs of the namespaces it may apply, whose jobs it may replace
// and so read whole, secrets included (none: nothing).
func exportScope(r *http.Request) (scope []string, limited bool) {
	id, ok := auth.IdentityOf(r.Context())
	if !ok || id.AllNamespaces(acl.CapApply) {
		return nil, false
	}
	return id.Namespaces(acl.CapApply), true
}

// scopedExport is set with only the jobs of the namespaces scope
// matches, and its counts of those.
func scopedExport(set fsm.JobSetExport, scope []string) fsm.JobSetExport {
	in := func(name string) bool { return acl.MatchAny(scope, fencedstore.JobNamespace(name)) }
	out := fsm.JobSetExport{Info: set.Info}
	for _, s := range set.Jobs {
		if in(s.Name) {
			out.Jobs = append(out.Jobs, s)
		}
	}
	byOperator := map[string]bool{}
	for _, n := range set.OperatorPaused {
		if in(n) {
			out.OperatorPaused = append(out.OperatorPaused, n)
			byOperator[n] = true
		}
	}
	out.Info.Count, out.Info.Paused, out.Info.First = len(out.Jobs), 0, ""
	for _, s := range out.Jobs {
		if s.Paused || byOperator[s.Name] {
			out.Info.Paused++
		}
	}
	if len(out.Jobs) > 0 {
		out.Info.First = out.Jobs[0].Name
	}
	return out
}

// specNamespace is the namespace of a spec as sent: its namespace field,
// or the one its name is qualified with.
func specNamespace(s *jobs.Spec) string {
	if s.Namespace != "" {
		return s.Namespace
	}
	return fencedstore.JobNamespace(s.Name)
}

// aclAsker names the caller for the audit trail when ACLs are on, and
// is "" otherwise: a field an older leader, during an upgrade, would
// refuse is sent only once every server reads it (ACLs need version 10).
func aclAsker(r *http.Request, g *auth.Guard) string {
	if _, ok := auth.IdentityOf(r.Context()); !ok {
		return ""
	}
	return g.Asker(r)
}

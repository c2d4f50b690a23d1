package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
	"github.com/fencecron/fencecron/web/auth"
)

// handleApplyJobChanges is PUT /api/v1/jobset/changes: a job set given as
// what changed since the set of hash base (wire.JobSetChanges). If the
// node's replicated set is that set, the new one is it with the jobs
// named removed and the specs sent put in (in place, or last if new), and
// it is applied as PUT /api/v1/jobset would apply it, with the same
// checks. Otherwise nothing is applied and the answer gives the set's
// hash: the caller sends the set another way.
//
// A token limited to some namespaces may name only jobs of those
// namespaces, and what it applies replaces only those namespaces' jobs,
// as in a whole apply.
func (s *Server) handleApplyJobChanges(w http.ResponseWriter, r *http.Request) {
	body, err := readJobSetBody(w, r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	req, err := wire.DecodeJobSetChanges(body)
	if err != nil {
		s.Error(w, r, BadRequest("decode job set changes: %v", err))
		return
	}
	if req.Base == "" {
		s.Error(w, r, BadRequest("job set changes without a base: the hash of the set they change"))
		return
	}
	if n := len(req.Specs) + len(req.Remove); n > jobs.MaxJobs {
		s.Error(w, r, fmt.Errorf("%w: %d jobs changed; a job set holds at most %d", jobs.ErrInvalidConfig, n, jobs.MaxJobs))
		return
	}
	// Named as the set names its jobs, whichever way the changes go.
	for i := range req.Specs {
		req.Specs[i].Normalize()
	}
	for i, name := range req.Remove {
		req.Remove[i] = jobs.QualifiedName(jobs.SplitQualified(name))
	}
	set := s.State.ExportJobSet()
	if set.Info.Hash != req.Base {
		WriteJSON(w, http.StatusOK, wire.JobSetChangesAnswer{Set: set.Info.Hash})
		return
	}
	_, limited := exportScope(r)
	if !limited {
		// The leader applies the changes alone if it can.
		source := req.Source
		if source == "" {
			source = "PUT /api/v1/jobset/changes from " + r.RemoteAddr
		}
		hash, n, err := s.Scheduler.SetJobsChanges(r.Context(), scheduler.JobChanges{Base: req.Base, Upsert: req.Specs, Remove: req.Remove}, source)
		switch {
		case err == nil:
			WriteJSON(w, http.StatusOK, wire.JobSetChangesAnswer{Applied: &wire.JobSetApplied{Hash: hash, Source: source, Jobs: n}})
			return
		case errors.Is(err, fsm.ErrJobsDiffBase):
			WriteJSON(w, http.StatusOK, wire.JobSetChangesAnswer{Set: s.State.ExportJobSet().Info.Hash})
			return
		case !errors.Is(err, scheduler.ErrChangesNeedSet):
			s.Error(w, r, err)
			return
		}
	}
	specs, kept, removed, err := changedSet(set.Jobs, req.Specs, req.Remove)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if limited {
		if _, err := applyScope(r, append(slices.Clip(req.Specs), removed...)); err != nil {
			s.Error(w, r, err)
			return
		}
		// The jobs the caller may apply, as a file of theirs holds them.
		id, _ := auth.IdentityOf(r.Context())
		specs = slices.DeleteFunc(specs, func(s jobs.Spec) bool { return !id.Allowed(specNamespace(&s), acl.CapApply) })
		kept = nil
	}
	applied, err := s.applySet(r, specs, scheduler.KnownJobs{Base: set.Info.Hash, Kept: kept}, req.Source, "PUT /api/v1/jobset/changes")
	if err != nil {
		s.Error(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, wire.JobSetChangesAnswer{Applied: &applied})
}

// changedSet is the set cur becomes with the jobs named in remove taken
// out and upsert put in: each in the place of the job of its name, or
// after the others if cur has none. kept marks the jobs that are cur's;
// removed are the jobs taken out. A name twice in the changes, or the
// removal of a job cur does not hold, is an error. cur is not changed.
func changedSet(cur []*jobs.Spec, upsert []jobs.Spec, remove []string) (specs []jobs.Spec, kept []bool, removed []jobs.Spec, err error) {
	// Each name changed: its index k in upsert, or -1-k for remove[k].
	named := make(map[string]int, len(upsert)+len(remove))
	for k, name := range remove {
		if _, twice := named[name]; twice {
			return nil, nil, nil, BadRequest("job %s is named twice", clipParam(name))
		}
		named[name] = -1 - k
	}
	for k := range upsert {
		name := upsert[k].Name
		if _, twice := named[name]; twice {
			return nil, nil, nil, BadRequest("job %s is named twice", clipParam(name))
		}
		named[name] = k
	}
	n := len(cur) + len(upsert) - len(remove)
	specs, kept = make([]jobs.Spec, 0, max(n, 0)), make([]bool, 0, max(n, 0))
	placed := make([]bool, len(upsert))
	gone := make([]bool, len(remove))
	for i := range cur {
		k, ok := named[cur[i].Name]
		switch {
		case !ok:
			specs, kept = append(specs, *cur[i]), append(kept, true)
		case k < 0:
			gone[-1-k] = true
			removed = append(removed, *cur[i])
		default:
			specs, kept = append(specs, upsert[k]), append(kept, false)
			placed[k] = true
		}
	}
	if k := slices.Index(gone, false); k >= 0 {
		return nil, nil, nil, BadRequest("the changes remove job %s, which the set does not hold", clipParam(remove[k]))
	}
	for k := range upsert {
		if !placed[k] {
			specs, kept = append(specs, upsert[k]), append(kept, false)
		}
	}
	return specs, kept, removed, nil
}

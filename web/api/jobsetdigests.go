package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// handleApplyJobDigests is PUT /api/v1/jobset/digests: a job set given by
// its jobs' digests (wire.JobSetDigests). Each job the node's replicated
// set holds with the same digest is taken from it; a job sent whole is
// taken as sent. When every job is accounted for the set is applied as PUT
// /api/v1/jobset would apply it, with the same checks; otherwise nothing
// is applied and the answer names the jobs to send whole.
//
// A token limited to some namespaces may name only jobs of those
// namespaces, as in a whole apply, so what a node answers about a digest
// is only ever about a job its caller may export.
func (s *Server) handleApplyJobDigests(w http.ResponseWriter, r *http.Request) {
	body, err := readJobSetBody(w, r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	var req wire.JobSetDigests
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.Error(w, r, BadRequest("decode job set digests: %v", err))
		return
	}
	if len(req.Jobs) > jobs.MaxJobs {
		s.Error(w, r, fmt.Errorf("%w: %d jobs; a job set holds at most %d", jobs.ErrInvalidConfig, len(req.Jobs), jobs.MaxJobs))
		return
	}
	if err := namesInScope(r, req.Jobs); err != nil {
		s.Error(w, r, err)
		return
	}
	specs, need, err := s.digests.resolve(s.State.ExportJobSet(), req)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if len(need) > 0 {
		WriteJSON(w, http.StatusOK, wire.JobSetDigestsAnswer{Need: need})
		return
	}
	applied, err := s.applySet(r, specs, req.Source, "PUT /api/v1/jobset/digests")
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if applied.Namespaces == nil {
		// The next apply meets this set: its digests are known already.
		s.digests.keep(applied.Hash, specs, req.Jobs)
	}
	WriteJSON(w, http.StatusOK, wire.JobSetDigestsAnswer{Applied: &applied})
}

// namesInScope refuses, for a token limited to some namespaces, a job
// named in a namespace it may not apply, before any digest is compared.
func namesInScope(r *http.Request, named []wire.JobDigest) error {
	if _, limited := exportScope(r); !limited {
		return nil
	}
	specs := make([]jobs.Spec, len(named))
	for i, d := range named {
		specs[i].Name = d.Name
	}
	_, err := applyScope(r, specs)
	return err
}

// digestCache keeps the digests of one replicated job set, the last one
// asked about: computing them costs an encoding of the whole set, and
// successive applies meet the same set, or the one the last of them made.
type digestCache struct {
	mu     sync.Mutex
	hash   string // of the set below
	set    []jobs.Spec
	byName map[string]int // index in set
	digest []string       // of set[i]
}

// keep makes set, of the given hash and digests, the one the cache
// holds.
func (c *digestCache) keep(hash string, set []jobs.Spec, digests []wire.JobDigest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hash, c.set, c.digest = hash, set, make([]string, len(set))
	c.byName = make(map[string]int, len(set))
	for i, d := range digests {
		c.digest[i] = d.Digest
		c.byName[d.Name] = i
	}
}

// resolve builds the set req describes from set (the replicated one, as
// exported) and the specs req sends: each job in req's order, from req's
// specs if sent, else from set if it holds that name with that digest.
// need names the jobs found in neither.
func (c *digestCache) resolve(set fsm.JobSetExport, req wire.JobSetDigests) (specs []jobs.Spec, need []string, err error) {
	sent := make(map[string]int, len(req.Specs))
	for i := range req.Specs {
		sent[req.Specs[i].Name] = i
	}
	used := 0
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hash != set.Info.Hash || c.byName == nil {
		c.hash, c.set, c.digest = set.Info.Hash, set.Jobs, jobs.SpecDigests(set.Jobs)
		c.byName = make(map[string]int, len(set.Jobs))
		for i := range set.Jobs {
			c.byName[set.Jobs[i].Name] = i
		}
	}
	specs = make([]jobs.Spec, len(req.Jobs))
	for i, d := range req.Jobs {
		if j, ok := sent[d.Name]; ok {
			specs[i] = req.Specs[j]
			used++
			continue
		}
		if j, ok := c.byName[d.Name]; ok && c.digest[j] == d.Digest {
			specs[i] = c.set[j]
			continue
		}
		need = append(need, d.Name)
	}
	if used != len(req.Specs) {
		return nil, nil, BadRequest("%d of the %d specs sent are of no job named in the set, or of a job named twice", len(req.Specs)-used, len(req.Specs))
	}
	return specs, need, nil
}

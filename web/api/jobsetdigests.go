package api

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
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
	req, err := wire.DecodeJobSetDigests(body)
	if err != nil {
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
	set := s.State.ExportJobSet()
	specs, kept, need, err := s.digests.resolve(set, req)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if len(need) > 0 {
		WriteJSON(w, http.StatusOK, wire.JobSetDigestsAnswer{Need: need})
		return
	}
	applied, err := s.applySet(r, specs, scheduler.KnownJobs{Base: set.Info.Hash, Kept: kept}, req.Source, "PUT /api/v1/jobset/digests")
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if applied.Namespaces == nil {
		// The next apply meets this set: its digests are known already.
		s.digests.keep(applied.Hash, req.Jobs)
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

// digestCache keeps the digests of one replicated job set by job name,
// the last set asked about: computing them costs an encoding of the whole
// set, and successive applies meet the same set, or the one the last of
// them made. It keeps no spec: those are read from the set each time.
type digestCache struct {
	mu     sync.Mutex
	hash   string // of the set whose digests these are
	digest map[string]string

	priming atomic.Bool // a prime is computing digests
}

// prime computes, in the background, the digests of specs, a set this
// node has just applied whole as the one of the given hash, so that the
// first apply by digest after it finds them kept rather than encoding
// the set while its caller waits. One runs at a time; a prime asked for
// while one runs is dropped, and an apply by digest then computes them.
// done is closed when the prime ends (nil if it was dropped).
func (c *digestCache) prime(hash string, specs []jobs.Spec) (done <-chan struct{}) {
	if !c.priming.CompareAndSwap(false, true) {
		return nil
	}
	c.mu.Lock()
	was := c.hash
	c.mu.Unlock()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer c.priming.Store(false)
		digest := digestsOf(specs)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.hash == was { // else an apply by digest kept a newer set meanwhile
			c.hash, c.digest = hash, digest
		}
	}()
	return ended
}

// keep makes the set of the given hash, whose jobs' digests req gives
// (each checked by resolve), the one the cache holds.
func (c *digestCache) keep(hash string, req []wire.JobDigest) {
	digest := make(map[string]string, len(req))
	for _, d := range req {
		digest[d.Name] = d.Digest
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hash, c.digest = hash, digest
}

// digestsOf is the digests of specs by the names the replicated set
// gives their jobs (normalized: a set sent whole may qualify a name with
// its namespace field instead).
func digestsOf(specs []jobs.Spec) map[string]string {
	digests := jobs.SpecDigests(specs)
	digest := make(map[string]string, len(specs))
	for i := range specs {
		s := specs[i]
		s.Normalize()
		digest[s.Name] = digests[i]
	}
	return digest
}

// digests returns the digests of set's jobs by name.
func (c *digestCache) digests(set fsm.JobSetExport) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hash != set.Info.Hash || c.digest == nil {
		c.hash, c.digest = set.Info.Hash, digestsOf(set.Jobs)
	}
	return c.digest
}

// resolve builds the set req describes from set (the replicated one, as
// exported) and the specs req sends: each job in req's order, from req's
// specs if sent, else from set if it holds that name with that digest.
// kept marks the jobs taken from set; need names the jobs found in
// neither, and then no set is built. A spec sent must have the digest req
// gives it, so that what the cache keeps of the set resolve makes is true
// of it.
func (c *digestCache) resolve(set fsm.JobSetExport, req wire.JobSetDigests) (specs []jobs.Spec, kept []bool, need []string, err error) {
	named := make(map[string]int, len(req.Jobs))
	for i, d := range req.Jobs {
		if !validDigest(d.Digest) {
			return nil, nil, nil, BadRequest("job %s: digest %q is not %d lowercase hex digits", clipParam(d.Name), clipParam(d.Digest), jobs.DigestLen)
		}
		if _, twice := named[d.Name]; twice {
			return nil, nil, nil, BadRequest("job %s is named twice", clipParam(d.Name))
		}
		named[d.Name] = i
	}
	// from is where each job is found: k+1 for set.Jobs[k], -(k+1) for
	// req.Specs[k]. The set is built only once every job is found: 100,000
	// specs copied for an answer that needs some cost more than the rest.
	from := make([]int, len(req.Jobs))
	for k, d := range jobs.SpecDigests(req.Specs) {
		name := req.Specs[k].Name
		i, ok := named[name]
		switch {
		case !ok:
			return nil, nil, nil, BadRequest("a spec was sent for job %s, which the set does not name", clipParam(name))
		case from[i] != 0:
			return nil, nil, nil, BadRequest("job %s was sent twice", clipParam(name))
		case req.Jobs[i].Digest != d:
			return nil, nil, nil, BadRequest("job %s: the spec sent has digest %s, not the %s given for it", clipParam(name), d, req.Jobs[i].Digest)
		}
		from[i] = -(k + 1)
	}
	digest := c.digests(set)
	for k := range set.Jobs {
		name := set.Jobs[k].Name
		if i, ok := named[name]; ok && from[i] == 0 && digest[name] == req.Jobs[i].Digest {
			from[i] = k + 1
		}
	}
	for i, k := range from {
		if k == 0 {
			need = append(need, req.Jobs[i].Name)
		}
	}
	if len(need) > 0 {
		return nil, nil, need, nil
	}
	specs, kept = make([]jobs.Spec, len(req.Jobs)), make([]bool, len(req.Jobs))
	for i, k := range from {
		if k > 0 {
			specs[i], kept[i] = set.Jobs[k-1], true
		} else {
			specs[i] = req.Specs[-k-1]
		}
	}
	return specs, kept, nil, nil
}

// validDigest reports whether d is written as jobs.SpecDigests writes
// one.
func validDigest(d string) bool {
	if len(d) != jobs.DigestLen {
		return false
	}
	for _, c := range []byte(d) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
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
	res, err := s.digests.resolve(set, req)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if len(res.need) > 0 {
		WriteJSON(w, http.StatusOK, wire.JobSetDigestsAnswer{Need: res.need})
		return
	}
	applied, err := s.applySet(r, res.specs, scheduler.KnownJobs{Base: set.Info.Hash, Kept: res.kept}, req.Source, "PUT /api/v1/jobset/digests")
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if applied.Namespaces == nil {
		// The next apply meets this set: its digests are known already.
		if now := s.State.ExportJobSet(); now.Info.Hash == applied.Hash {
			s.digests.keep(now, req.Jobs, res)
		}
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

// digestCache keeps the digests of one replicated job set, the last set
// asked about: computing them costs an encoding of the whole set, and
// successive applies meet the same set, or the one the last of them
// made. It keeps no spec: those are read from the set each time.
type digestCache struct {
	mu   sync.Mutex
	hash string // of the set whose digests these are
	of   *setDigests

	priming atomic.Bool // a prime is computing digests
}

// setDigests are the digests of a set's jobs, by their positions in the
// set, and each job's position by its name. Neither is changed once
// made: a set of the same names at the same positions (one that an apply
// changed only some jobs of) shares at with the set it came from.
type setDigests struct {
	at     map[string]int
	digest []string
}

// prime computes, in the background, the digests of specs, the
// replicated set of the given hash this node has just applied whole (in
// its order: the digests are by position), so that the
// first apply by digest after it finds them kept rather than encoding
// the set while its caller waits. One runs at a time; a prime asked for
// while one runs is dropped, and an apply by digest then computes them.
// done is closed when the prime ends (nil if it was dropped).
func (c *digestCache) prime(hash string, specs []*jobs.Spec) (done <-chan struct{}) {
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
		of := digestsOf(specs)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.hash == was { // else an apply by digest kept a newer set meanwhile
			c.hash, c.of = hash, of
		}
	}()
	return ended
}

// keep makes set, the replicated set an apply by digest made from req
// (resolved as res), the one the cache holds. Where the apply changed
// only some jobs, the set has the names of the set res was resolved
// against at the same positions: its digests are those, with the ones
// req changed. Otherwise they are req's, placed by name.
func (c *digestCache) keep(set fsm.JobSetExport, req []wire.JobDigest, res resolved) {
	of := &setDigests{at: res.of.at}
	same := len(set.Jobs) == len(req) && len(res.of.digest) == len(req)
	for i := 0; same && i < len(req); i++ {
		same = res.at[i] >= 0 && set.Jobs[res.at[i]].Name == req[i].Name
	}
	if same {
		of.digest = slices.Clone(res.of.digest)
		for i, k := range res.at {
			of.digest[k] = req[i].Digest
		}
	} else {
		byName := make(map[string]string, len(req))
		for _, d := range req {
			byName[d.Name] = d.Digest
		}
		of.at, of.digest = make(map[string]int, len(set.Jobs)), make([]string, len(set.Jobs))
		for k := range set.Jobs {
			name := set.Jobs[k].Name
			d, ok := byName[name]
			if !ok {
				return // not the set req made: the next apply computes them
			}
			of.at[name], of.digest[k] = k, d
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hash, c.of = set.Info.Hash, of
}

// digestsOf is the digests of specs, a replicated set (whose names are
// each its own, and qualified by their namespace), with each job's
// position by its name.
func digestsOf(specs []*jobs.Spec) *setDigests {
	of := &setDigests{at: make(map[string]int, len(specs)), digest: jobs.SpecDigestsAt(len(specs), func(i int) *jobs.Spec { return specs[i] })}
	for i := range specs {
		of.at[specs[i].Name] = i
	}
	return of
}

// digests returns the digests of set's jobs.
func (c *digestCache) digests(set fsm.JobSetExport) *setDigests {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hash != set.Info.Hash || c.of == nil {
		c.hash, c.of = set.Info.Hash, digestsOf(set.Jobs)
	}
	return c.of
}

// resolved is what resolve makes of a request: the set it describes, or
// the jobs to send whole.
type resolved struct {
	specs []jobs.Spec // the set, in the request's order
	kept  []bool      // which of specs are the replicated set's
	need  []string    // the jobs found in neither: then no set is built
	// of is the digests resolve compared with, and at each job's
	// position in their set (-1: not in it).
	of *setDigests
	at []int
}

// resolve builds the set req describes from set (the replicated one, as
// exported) and the specs req sends: each job in req's order, from req's
// specs if sent, else from set if it holds that name with that digest.
// A spec sent must have the digest req gives it, so that what the cache
// keeps of the set resolve makes is true of it.
func (c *digestCache) resolve(set fsm.JobSetExport, req wire.JobSetDigests) (resolved, error) {
	res, err := resolveWith(c.digests(set), set, req)
	if errors.Is(err, errNotItsDigests) {
		// Never expected; but a job is never taken from the wrong place.
		of := digestsOf(set.Jobs)
		c.mu.Lock()
		c.hash, c.of = set.Info.Hash, of
		c.mu.Unlock()
		res, err = resolveWith(of, set, req)
	}
	return res, err
}

// errNotItsDigests is resolveWith's word that the digests it was given
// do not place set's jobs where set has them.
var errNotItsDigests = errors.New("the digests kept are not of this set")

// resolveWith is resolve, comparing with of, the digests of set.
func resolveWith(of *setDigests, set fsm.JobSetExport, req wire.JobSetDigests) (resolved, error) {
	var none resolved
	if len(of.digest) != len(set.Jobs) {
		return none, errNotItsDigests
	}
	res := resolved{of: of, at: make([]int, len(req.Jobs))}
	// Each job's position in the set (at), or for a name the set does not
	// hold its index in new. A name twice is one position taken twice
	// (reqAt holds the request's index+1 of each position taken), or a
	// new name twice.
	reqAt := make([]int32, len(set.Jobs))
	var new map[string]int
	for i, d := range req.Jobs {
		if !jobs.ValidDigest(d.Digest) {
			return none, BadRequest("job %s: digest %q is not %d lowercase hex digits", clipParam(d.Name), clipParam(d.Digest), jobs.DigestLen)
		}
		// A file edited in place names the set's jobs at their positions:
		// one comparison each rather than a lookup by name.
		k, in := i, i < len(set.Jobs) && set.Jobs[i].Name == d.Name
		if !in {
			k, in = of.at[d.Name]
		}
		switch {
		case !in:
			k = -1
			if new == nil {
				new = make(map[string]int)
			}
			if _, twice := new[d.Name]; twice {
				return none, BadRequest("job %s is named twice", clipParam(d.Name))
			}
			new[d.Name] = i
		case set.Jobs[k].Name != d.Name:
			return none, errNotItsDigests
		case reqAt[k] != 0:
			return none, BadRequest("job %s is named twice", clipParam(d.Name))
		default:
			reqAt[k] = int32(i + 1)
		}
		res.at[i] = k
	}
	// from is where each job is found: k+1 for set.Jobs[k], -(k+1) for
	// req.Specs[k]. The set is built only once every job is found: 100,000
	// specs copied for an answer that needs some cost more than the rest.
	from := make([]int, len(req.Jobs))
	for k, d := range jobs.SpecDigests(req.Specs) {
		name := req.Specs[k].Name
		i, ok := new[name]
		if p, in := of.at[name]; in && reqAt[p] != 0 {
			i, ok = int(reqAt[p]-1), true
		}
		switch {
		case !ok:
			return none, BadRequest("a spec was sent for job %s, which the set does not name", clipParam(name))
		case from[i] != 0:
			return none, BadRequest("job %s was sent twice", clipParam(name))
		case req.Jobs[i].Digest != d:
			return none, BadRequest("job %s: the spec sent has digest %s, not the %s given for it", clipParam(name), d, req.Jobs[i].Digest)
		}
		from[i] = -(k + 1)
	}
	for i, k := range res.at {
		switch {
		case from[i] != 0:
		case k >= 0 && of.digest[k] == req.Jobs[i].Digest:
			from[i] = k + 1
		default:
			res.need = append(res.need, req.Jobs[i].Name)
		}
	}
	if len(res.need) > 0 {
		return res, nil
	}
	res.specs, res.kept = make([]jobs.Spec, len(req.Jobs)), make([]bool, len(req.Jobs))
	for i, k := range from {
		if k > 0 {
			res.specs[i], res.kept[i] = *set.Jobs[k-1], true
		} else {
			res.specs[i] = req.Specs[-k-1]
		}
	}
	return res, nil
}

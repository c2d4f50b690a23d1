package scheduler

import (
	"cmp"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"fmt"
	"hash"

	"github.com/fencecron/fencecron/jobs"
)

// setHasher hashes job sets as jobs.HashSpecs does, and keeps the
// SHA-256 state after every hashWindow jobs (in name order) of the last
// set it hashed. The hash of a set that shares its first jobs in name
// order with that one starts from the state after them: a change of one
// job among 100,000 encodes and hashes the jobs from that one on, not the
// 32 MB of the whole set (40-60 ms on the leader, before the change is
// proposed). The leader uses it under setJobs' lock.
type setHasher struct {
	of     string   // the hash of the set the states are of ("" for none)
	states [][]byte // states[w]: after the set's first (w+1)*window jobs
	window int      // hashWindow, or a test's
	hashed int      // how many jobs the last hash encoded (tests)
}

// hashWindow is how many jobs, in name order, lie between two states a
// setHasher keeps: a change hashes at most this many of the jobs before it
// again. Each is a window jobs.EncodeSpecsRange encodes at a time.
const hashWindow = 4096

// hashSet returns the hash of specs (jobs.HashSpecs).
func (h *setHasher) hashSet(specs []jobs.Spec) string {
	if specs == nil {
		h.of, h.states = "", nil
		return jobs.HashSpecs(nil) // of "null", as json.Marshal writes a nil set
	}
	order := jobs.NameOrder(len(specs), func(i int) *jobs.Spec { return &specs[i] })
	return h.hash(len(specs), func(k int) *jobs.Spec { return &specs[order[k]] }, "", nil)
}

// hash returns the hash of the set of n jobs at gives in name order.
// was gives, in name order, the jobs of the set of hash base: if the
// states kept are that set's, the jobs at and was give alike (the same
// spec, at the same place) are not hashed again, up to the last state
// kept before the first that differs.
func (h *setHasher) hash(n int, at func(k int) *jobs.Spec, base string, was func(k int) *jobs.Spec) string {
	d := sha256.New()
	from, window := 0, cmp.Or(h.window, hashWindow)
	var states [][]byte
	if was != nil && base != "" && base == h.of {
		for from < n && from < len(h.states)*window && at(from) == was(from) {
			from++
		}
		// A state before the last job: the hash goes on from it.
		if w := min(from, n-1) / window; w > 0 && d.(encoding.BinaryUnmarshaler).UnmarshalBinary(h.states[w-1]) == nil {
			states, from = h.states[:w:w], w*window
		} else {
			d.Reset()
			from = 0
		}
	}
	h.hashed = n - from
	mark := func(end int) {
		if end < n {
			states = append(states, marshalState(d))
		}
	}
	if err := jobs.EncodeSpecsRange(d, n, at, from, n, window, mark); err != nil {
		panic(fmt.Sprintf("hash job set: %v", err)) // specs are plain data, and a hash takes every write
	}
	sum := hex.EncodeToString(d.Sum(nil)[:8])
	h.of, h.states = sum, states
	return sum
}

// marshalState is d's state, to resume from.
func marshalState(d hash.Hash) []byte {
	b, err := d.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(fmt.Sprintf("hash job set: the SHA-256 state: %v", err)) // crypto/sha256 marshals its state
	}
	return b
}

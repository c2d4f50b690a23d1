package api

import (
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// BenchmarkDigestCache_ResolveOneChange_100k is what a node does with an
// apply by digest of a 100,000-job set edited in place: one job changed,
// sent whole, the others named by their digests, the set's digests kept
// from the apply before.
func BenchmarkDigestCache_ResolveOneChange_100k(b *testing.B) {
	held := jobstest.Daily(100_000)
	set := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h1", Count: len(held)}, Jobs: jobs.Addrs(held)}
	digests := jobs.SpecDigests(held)
	changed := held[len(held)/2]
	changed.Schedules = []string{"1 2 * * *"}
	req := wire.JobSetDigests{Jobs: make([]wire.JobDigest, len(held)), Specs: []jobs.Spec{changed}}
	for i := range held {
		// Decoded from a request: names of their own, not the set's.
		req.Jobs[i] = wire.JobDigest{Name: string([]byte(held[i].Name)), Digest: digests[i]}
	}
	req.Jobs[len(held)/2].Digest = jobs.SpecDigests(req.Specs)[0]
	var c digestCache
	c.digests(set)
	for b.Loop() {
		res, err := c.resolve(set, req)
		if err != nil || len(res.need) > 0 || len(res.specs) != len(held) {
			b.Fatalf("need %v, %d specs, %v", res.need, len(res.specs), err)
		}
	}
}

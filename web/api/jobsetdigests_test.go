package api

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// A set given by digests takes each job the node holds with the same
// digest from the node's set, each job sent whole as sent, and names the
// rest as needed; a spec sent for no job the set names is refused.
func TestDigestCache_Resolve(t *testing.T) {
	spec := func(name, schedule string) jobs.Spec {
		s := jobs.Spec{Name: name, Schedules: []string{schedule}, Command: []string{"/bin/true"}}
		s.Normalize()
		return s
	}
	held := []jobs.Spec{spec("a", "@daily"), spec("b", "@daily"), spec("c", "@daily")}
	set := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h1", Count: 3}, Jobs: jobs.Addrs(held)}
	mine := []jobs.Spec{spec("a", "@daily"), spec("b", "@hourly"), spec("d", "@daily")}
	digests := jobs.SpecDigests(mine)
	req := wire.JobSetDigests{Jobs: []wire.JobDigest{{Name: "a", Digest: digests[0]}, {Name: "b", Digest: digests[1]}, {Name: "d", Digest: digests[2]}}}

	var c digestCache
	res, err := c.resolve(set, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.need, []string{"b", "d"}) || res.specs != nil || res.kept != nil {
		t.Errorf("need %v, %d specs, kept %v; want b (changed) and d (new) needed, and no set built", res.need, len(res.specs), res.kept)
	}

	req.Specs = []jobs.Spec{mine[1], mine[2]}
	res, err = c.resolve(set, req)
	if err != nil || len(res.need) > 0 {
		t.Fatalf("resolve with b and d sent: need %v, %v", res.need, err)
	}
	if got := jobs.SpecDigests(res.specs); !slices.Equal(got, digests) || !slices.Equal(res.kept, []bool{true, false, false}) {
		t.Errorf("resolved set's digests %v; want the sender's %v", got, digests)
	}

	for name, bad := range map[string]func(r *wire.JobSetDigests){
		"a spec of a job the set does not name": func(r *wire.JobSetDigests) { r.Specs = append(r.Specs, spec("e", "@daily")) },
		"a spec sent twice":                     func(r *wire.JobSetDigests) { r.Specs = append(r.Specs, r.Specs[0]) },
		"a spec whose digest is not the one given": func(r *wire.JobSetDigests) {
			r.Specs[0] = spec("b", "@weekly")
		},
		"a digest not written as SpecDigests writes one": func(r *wire.JobSetDigests) { r.Jobs[0].Digest = "ABC" },
		"a job named twice": func(r *wire.JobSetDigests) { r.Jobs = append(r.Jobs, r.Jobs[0]) },
	} {
		r := req
		r.Jobs, r.Specs = slices.Clone(req.Jobs), slices.Clone(req.Specs)
		bad(&r)
		if _, err := c.resolve(set, r); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: %v; want a bad request", name, err)
		}
	}

	// The set an apply made, kept with its digests, is found by its hash
	// without a spec of it encoded again; its specs come from the set. c
	// was removed and d added: the FSM's set is a, b, d (DecideJobsDiff).
	set3 := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h3", Count: 3}, Jobs: jobs.Addrs(mine)}
	c.keep(set3, req.Jobs, res)
	if got := c.digests(set3); !slices.Equal(got.digest, digests) || got.at["d"] != 2 {
		t.Errorf("kept digests %v; want the applied set's", got)
	}
	if res, err := c.resolve(set3, wire.JobSetDigests{Jobs: req.Jobs}); err != nil || len(res.need) > 0 || res.specs[1].Schedules[0] != "@hourly" {
		t.Errorf("against the kept set: need %v, %v; want every job from the set", res.need, err)
	}

	// One job changed, in a request of another order: the set keeps its
	// names where they were, and so do the digests kept.
	changed := spec("b", "@weekly")
	bw := jobs.SpecDigests([]jobs.Spec{changed})[0]
	req4 := wire.JobSetDigests{Jobs: []wire.JobDigest{{Name: "d", Digest: digests[2]}, {Name: "b", Digest: bw}, {Name: "a", Digest: digests[0]}}, Specs: []jobs.Spec{changed}}
	res4, err := c.resolve(set3, req4)
	if err != nil || len(res4.need) > 0 {
		t.Fatalf("one job changed: need %v, %v", res4.need, err)
	}
	set4 := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h4", Count: 3}, Jobs: []*jobs.Spec{&mine[0], &changed, &mine[2]}}
	c.keep(set4, req4.Jobs, res4)
	if got := c.digests(set4); !slices.Equal(got.digest, []string{digests[0], bw, digests[2]}) {
		t.Errorf("kept digests after one change %v", got.digest)
	}

	// Digests kept in another order than the set's (never expected) are
	// not believed: each job is still compared with its own.
	c.keep(fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h5", Count: 3}, Jobs: []*jobs.Spec{&mine[2], &mine[1], &mine[0]}}, req.Jobs, res)
	set5 := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h5", Count: 3}, Jobs: jobs.Addrs(held)}
	if res, err := c.resolve(set5, wire.JobSetDigests{Jobs: req.Jobs}); err != nil || !slices.Equal(res.need, []string{"b", "d"}) {
		t.Errorf("against digests of another order: need %v, %v; want b and d", res.need, err)
	}

	// A set of another hash is the one compared with, not the cached.
	set2 := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h2", Count: 3}, Jobs: jobs.Addrs(mine)}
	req.Specs = nil
	if res, err := c.resolve(set2, req); err != nil || len(res.need) > 0 {
		t.Errorf("against a set holding every job: need %v, %v; want none", res.need, err)
	}
}

// A set applied whole is primed: its digests are computed in the
// background, by the names the replicated set gives its jobs, and an
// apply by digest then finds them without encoding the set.
func TestDigestCache_Prime(t *testing.T) {
	// As the replicated set holds it: its name qualified by its namespace.
	build := jobs.Spec{Name: "build", Namespace: "team-a", Schedules: []string{"@daily"}, Shell: "true"}
	build.Normalize()
	specs := []jobs.Spec{build}
	var c digestCache
	done := c.prime("h1", jobs.Addrs(specs))
	if done == nil {
		t.Fatal("the first prime was dropped")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the prime did not end in 10 s")
	}
	// A set of the same hash whose jobs are not what was primed would
	// show whether the kept digests were used.
	got := c.digests(fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h1"}})
	if k, ok := got.at["team-a:build"]; !ok || k != 0 || len(got.digest) != 1 || got.digest[0] != jobs.SpecDigests(specs)[0] {
		t.Errorf("primed digests %v; want team-a:build's at 0", got)
	}
}

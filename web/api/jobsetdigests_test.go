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
	set := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h1", Count: 3}, Jobs: held}
	mine := []jobs.Spec{spec("a", "@daily"), spec("b", "@hourly"), spec("d", "@daily")}
	digests := jobs.SpecDigests(mine)
	req := wire.JobSetDigests{Jobs: []wire.JobDigest{{Name: "a", Digest: digests[0]}, {Name: "b", Digest: digests[1]}, {Name: "d", Digest: digests[2]}}}

	var c digestCache
	specs, kept, need, err := c.resolve(set, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(need, []string{"b", "d"}) || specs != nil || kept != nil {
		t.Errorf("need %v, %d specs, kept %v; want b (changed) and d (new) needed, and no set built", need, len(specs), kept)
	}

	req.Specs = []jobs.Spec{mine[1], mine[2]}
	specs, kept, need, err = c.resolve(set, req)
	if err != nil || len(need) > 0 {
		t.Fatalf("resolve with b and d sent: need %v, %v", need, err)
	}
	if got := jobs.SpecDigests(specs); !slices.Equal(got, digests) || !slices.Equal(kept, []bool{true, false, false}) {
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
		if _, _, _, err := c.resolve(set, r); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: %v; want a bad request", name, err)
		}
	}

	// The set an apply made, kept with its digests, is found by its hash
	// without a spec of it encoded again; its specs come from the set.
	c.keep("h3", req.Jobs)
	set3 := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h3", Count: 3}, Jobs: mine}
	if got := c.digests(set3); got["b"] != digests[1] || len(got) != 3 {
		t.Errorf("kept digests %v; want the applied set's", got)
	}
	if specs, _, need, err := c.resolve(set3, wire.JobSetDigests{Jobs: req.Jobs}); err != nil || len(need) > 0 || specs[1].Schedules[0] != "@hourly" {
		t.Errorf("against the kept set: need %v, %v; want every job from the set", need, err)
	}

	// A set of another hash is the one compared with, not the cached.
	set2 := fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h2", Count: 3}, Jobs: mine}
	req.Specs = nil
	if _, _, need, err := c.resolve(set2, req); err != nil || len(need) > 0 {
		t.Errorf("against a set holding every job: need %v, %v; want none", need, err)
	}
}

// A set applied whole is primed: its digests are computed in the
// background, by the names the replicated set gives its jobs, and an
// apply by digest then finds them without encoding the set.
func TestDigestCache_Prime(t *testing.T) {
	specs := []jobs.Spec{{Name: "build", Namespace: "team-a", Schedules: []string{"@daily"}, Shell: "true"}}
	var c digestCache
	done := c.prime("h1", specs)
	if done == nil {
		t.Fatal("the first prime was dropped")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the prime did not end in 10 s")
	}
	normalized := specs[0]
	normalized.Normalize()
	// A set of the same hash whose jobs are not what was primed would
	// show whether the kept digests were used.
	got := c.digests(fsm.JobSetExport{Info: fsm.JobSetInfo{Hash: "h1"}})
	if want := jobs.SpecDigests(specs)[0]; len(got) != 1 || got[normalized.Name] != want {
		t.Errorf("primed digests %v; want %s: %s", got, normalized.Name, want)
	}
}

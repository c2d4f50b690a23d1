package scheduler

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/fsm/setdiff"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// keptButMiddle marks n jobs as an apply by digest of one change marks
// them: every job but the middle one, the changed one, is the replicated
// set's, checked when that set was.
func keptButMiddle(n int) []bool {
	kept := make([]bool, n)
	for i := range kept {
		kept[i] = i != n/2
	}
	return kept
}

// BenchmarkSetJobs_100k is what a node does with PUT /api/v1/jobset of
// 100,000 jobs, step by step: decode the request, check the set, hash it,
// encode the Raft entry, and apply it to the FSM (which decodes it again,
// as every replica does).
func BenchmarkSetJobs_100k(b *testing.B) {
	specs := jobstest.Daily(100_000)
	// As `fencecron apply` writes it.
	body, err := json.Marshal(wire.JobSetRequest{Source: "bench", Jobs: specs})
	if err != nil {
		b.Fatal(err)
	}
	decode := func(b *testing.B) []jobs.Spec {
		// As the web handler decodes it.
		req, err := wire.DecodeJobSetRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		return req.Jobs
	}
	s := &Scheduler{}
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			decode(b)
		}
	})
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.CheckJobs(specs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check of one change", func(b *testing.B) {
		kept := keptButMiddle(len(specs))
		for b.Loop() {
			if _, err := replicated.CheckJobSet(specs, s.JobLimits(), kept); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hash", func(b *testing.B) {
		for b.Loop() {
			jobs.HashSpecs(specs)
		}
	})
	entry, err := fsm.EncodeEntry(replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "bench", At: t0, Hash: "h"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if _, err := fsm.EncodeEntry(replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "bench", At: t0, Hash: "h"}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("apply", func(b *testing.B) {
		f := fsm.NewFSM()
		i := uint64(0)
		for b.Loop() {
			i++
			if res := f.Apply(rawLog(1, i, entry)).(fsm.ApplyResult); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})
	b.Run("diff from none", func(b *testing.B) {
		base := fsm.NewFSM().JobSetBase()
		for b.Loop() {
			if upsert, _ := setdiff.Of(base.Jobs, base.ByName, specs, nil); len(upsert) != len(specs) {
				b.Fatalf("%d jobs to add, want %d", len(upsert), len(specs))
			}
		}
	})
	b.Run("diff over a few jobs", func(b *testing.B) {
		// As `fencecron dev`, holding its demo jobs, takes a first file.
		f := fsm.NewFSM()
		few := jobstest.Daily(3)
		for i := range few {
			few[i].Name = fmt.Sprintf("demo-%d", i)
		}
		e, err := fsm.EncodeEntry(replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: few, Source: "bench", At: t0, Hash: jobs.HashSpecs(few)}})
		if err != nil {
			b.Fatal(err)
		}
		if res := f.Apply(rawLog(1, 1, e)).(fsm.ApplyResult); res.Err != nil {
			b.Fatal(res.Err)
		}
		base := f.JobSetBase()
		for b.Loop() {
			if upsert, remove := setdiff.Of(base.Jobs, base.ByName, specs, nil); len(upsert) != len(specs) || len(remove) != len(few) {
				b.Fatalf("%d jobs to add and %d to remove, want %d and %d", len(upsert), len(remove), len(specs), len(few))
			}
		}
	})
	b.Run("diff of one change", func(b *testing.B) {
		f := fsm.NewFSM()
		if res := f.Apply(rawLog(1, 1, entry)).(fsm.ApplyResult); res.Err != nil {
			b.Fatal(res.Err)
		}
		base := f.JobSetBase()
		next := jobs.Values(base.Jobs)
		next[len(next)/2].Schedules = []string{"1 2 * * *"}
		kept := keptButMiddle(len(next))
		for b.Loop() {
			if upsert, remove := setdiff.Of(base.Jobs, base.ByName, next, kept); len(upsert) != 1 || len(remove) != 0 {
				b.Fatalf("%d jobs to add and %d to remove, want 1 and 0", len(upsert), len(remove))
			}
		}
	})
	b.Run("apply one change", func(b *testing.B) {
		f := fsm.NewFSM()
		first, err := fsm.EncodeEntry(replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "bench", At: t0, Hash: jobs.HashSpecs(specs)}})
		if err != nil {
			b.Fatal(err)
		}
		if res := f.Apply(rawLog(1, 1, first)).(fsm.ApplyResult); res.Err != nil {
			b.Fatal(res.Err)
		}
		// Two sets that differ in one job's schedule, applied in turn.
		var entries [2][]byte
		base := f.JobSetBase()
		for k, sched := range []string{"1 2 * * *", specs[len(specs)/2].Schedules[0]} {
			changed := specs[len(specs)/2]
			changed.Schedules = []string{sched}
			next := slices.Clone(specs)
			next[len(next)/2] = changed
			hash := jobs.HashSpecs(next)
			d := replicated.SetJobsDiffCmd{Base: base.Hash, Upsert: []jobs.Spec{changed}, Hash: hash, Source: "bench", At: t0}
			if entries[k], err = fsm.EncodeEntry(replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &d}); err != nil {
				b.Fatal(err)
			}
			base.Hash = hash
		}
		i := uint64(1)
		for b.Loop() {
			i++
			if res := f.Apply(rawLog(1, i, entries[i%2])).(fsm.ApplyResult); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})
	// As a first apply of the set reaches every replica: a difference
	// from the empty set, in parts of at most fsm.MaxJobsDiffBytes.
	parts := jobsDiffParts("", specs, nil, jobs.HashSpecs(specs), "bench", t0)
	partEntries := make([][]byte, len(parts))
	for i := range parts {
		if partEntries[i], err = fsm.EncodeEntry(replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &parts[i]}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("apply parts", func(b *testing.B) {
		for b.Loop() {
			f := fsm.NewFSM()
			for i, e := range partEntries {
				if res := f.Apply(rawLog(1, uint64(i+1), e)).(fsm.ApplyResult); res.Err != nil {
					b.Fatal(res.Err)
				}
			}
			if n := len(f.JobSetBase().Jobs); n != len(specs) {
				b.Fatalf("%d jobs after %d parts, want %d", n, len(parts), len(specs))
			}
		}
	})
	b.Run("all", func(b *testing.B) {
		f := fsm.NewFSM()
		i := uint64(0)
		for b.Loop() {
			i++
			set, err := s.CheckJobs(decode(b))
			if err != nil {
				b.Fatal(err)
			}
			hash := jobs.HashSpecs(set)
			e, err := fsm.EncodeEntry(replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: set, Source: "bench", At: t0, Hash: hash}})
			if err != nil {
				b.Fatal(err)
			}
			if res := f.Apply(rawLog(1, i, e)).(fsm.ApplyResult); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})
}

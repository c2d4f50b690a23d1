package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// BenchmarkFSM_Steady is what every server's FSM applies per run at
// 1,000 fires a second of 1,000 HTTP jobs (fencebench lateness -rates
// 1000): each second's grants in batch entries of 200, then their
// completions in groups of 200, into a state whose runs and audit trail
// are full, so that each run also trims one and archives it. One op is
// one run; the entries are encoded (the leader's work) before the timer.
func BenchmarkFSM_Steady(b *testing.B) {
	const njobs, perEntry = 1000, 200
	specs := make([]jobs.Spec, njobs)
	for i := range specs {
		specs[i] = jobs.Spec{Name: fmt.Sprintf("job-%05d", i), Schedules: []string{"@every 1s"}, HTTP: &jobs.HTTP{URL: "http://127.0.0.1:9/"}}
	}
	var entries [][]byte
	add := func(c replicated.Command) {
		data, err := EncodeEntry(c)
		if err != nil {
			b.Fatal(err)
		}
		entries = append(entries, data)
	}
	add(replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "w1", At: t0}})
	add(replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "bench"}})
	sec, next := 0, 0
	runs := func(n int) {
		for n > 0 {
			k := min(n, perEntry, njobs-next)
			at := t0.Add(time.Duration(sec) * time.Second)
			gs := make([]replicated.GrantCmd, k)
			cs := make([]replicated.Completion, k)
			for i := range gs {
				job := specs[next+i].Name
				gs[i] = replicated.GrantCmd{Job: job, ScheduledAt: at, Worker: "w1", Trigger: "schedule", At: at}
				cs[i] = replicated.Completion{Attempt: jobs.AttemptID(jobs.RunID(job, at), 1), Node: "w1", State: jobs.Succeeded, StartedAt: at, EndedAt: at.Add(time.Millisecond)}
			}
			add(replicated.Command{Op: replicated.OpGrants, Grants: &replicated.GrantsCmd{Grants: gs}})
			add(replicated.Command{Op: replicated.OpCompletes, Completes: &replicated.CompletesCmd{Completions: cs}})
			n -= k
			if next += k; next == njobs {
				next, sec = 0, sec+1
			}
		}
	}
	runs(max(replicated.DefaultMaxRuns, 5*njobs)) // fills the runs kept and the audit trail
	prefill := len(entries)
	runs(b.N)
	f := NewFSM()
	f.History = discardHistory{}
	apply := func(i int) {
		res := f.Apply(&raft.Log{Term: 1, Index: uint64(i + 1), Type: raft.LogCommand, Data: entries[i]}).(ApplyResult)
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		for _, r := range res.Batch {
			if r.Err != nil {
				b.Fatalf("entry %d: %v", i+1, r.Err)
			}
		}
	}
	for i := range prefill {
		apply(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := prefill; i < len(entries); i++ {
		apply(i)
	}
}

// discardHistory takes what the FSM trims and keeps nothing.
type discardHistory struct{}

func (discardHistory) Archive(uint64, []jobs.Run, []jobs.Event) {}
func (discardHistory) Settle()                                  {}
func (discardHistory) Sync() error                              { return nil }
func (discardHistory) Restored(uint64) error                    { return nil }

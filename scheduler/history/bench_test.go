package history

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// benchStore fills a store with jobs × perJob finished runs, each with
// one attempt and a stderr tail of 200 bytes, archived 1000 to a commit.
func benchStore(b *testing.B, njobs, perJob int) (*Store, string) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "history.db")
	s, _ := MustOpen(b, jobs.History{Runs: perJob}, path)
	zero := 0
	tail := strings.Repeat("x", 200)
	var batch []jobs.Run
	idx := uint64(0)
	for i := range perJob {
		for j := range njobs {
			r := run(fmt.Sprintf("job-%05d", j), i, jobs.Succeeded)
			r.Attempts = []jobs.Attempt{{ID: jobs.AttemptID(r.ID, 1), Number: 1, Token: jobs.Fence{Epoch: 3, Seq: uint64(i*njobs + j + 1)},
				Worker: "w1", State: jobs.Succeeded, GrantedAt: r.ScheduledAt, StartedAt: r.ScheduledAt, EndedAt: r.ScheduledAt.Add(time.Second),
				ExitCode: &zero, StoreOutcome: "applied", StderrTail: tail}}
			batch = append(batch, r)
			if len(batch) == 1000 {
				idx++
				s.Archive(idx, batch, nil)
				if err := s.Flush(); err != nil {
					b.Fatal(err)
				}
				batch = nil
			}
		}
	}
	idx++
	s.Archive(idx, batch, nil)
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	return s, path
}

// BenchmarkStore_Archive reports the file's size per run kept.
func BenchmarkStore_Archive(b *testing.B) {
	for range b.N {
		_, path := benchStore(b, 1000, 100)
		st, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Size())/100_000, "file-bytes/run")
	}
}

// BenchmarkStore_ListRuns lists a page of 100 of one job's runs, and of
// every job's, from 100,000 stored runs.
func BenchmarkStore_ListRuns(b *testing.B) {
	s, _ := benchStore(b, 1000, 100)
	for _, q := range []RunQuery{{Job: "job-00500", Limit: 100}, {Limit: 100}, {Job: "job-00500", States: []jobs.State{jobs.Failed}, Limit: 100}} {
		b.Run(fmt.Sprintf("job=%q,states=%v", q.Job, q.States), func(b *testing.B) {
			for range b.N {
				if _, err := s.ListRuns(nil, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStore_Steady is a server's history at a steady fire rate: a
// finished run and its two events (granted, completed) per op, committed
// in flushes of perFlush runs (at 600 fires/s, a flush every 200 ms
// holds 120 runs, one every second 600), into a store that already keeps
// its jobs' retention full.
func BenchmarkStore_Steady(b *testing.B) {
	const njobs, keep = 600, 20
	for _, perFlush := range []int{120, 600} {
		b.Run(fmt.Sprintf("runs/flush=%d", perFlush), func(b *testing.B) {
			s, _ := MustOpen(b, jobs.History{Runs: keep}, "")
			zero := 0
			seq, idx, sec := uint64(0), uint64(0), 0
			next := func() (jobs.Run, []jobs.Event) {
				j := int(seq/2) % njobs
				if j == 0 {
					sec++
				}
				r := run(fmt.Sprintf("job-%05d", j), sec, jobs.Succeeded)
				r.Attempts = []jobs.Attempt{{ID: jobs.AttemptID(r.ID, 1), Number: 1, Token: jobs.Fence{Epoch: 3, Seq: seq + 1},
					Worker: "w1", State: jobs.Succeeded, GrantedAt: r.ScheduledAt, StartedAt: r.ScheduledAt, EndedAt: r.ScheduledAt.Add(time.Millisecond),
					ExitCode: &zero, StoreOutcome: "applied"}}
				evs := []jobs.Event{
					{Seq: seq + 1, Time: r.ScheduledAt, Kind: jobs.EventGranted, Node: "w1", Job: r.Job, Run: r.ID, Attempt: r.Attempts[0].ID},
					{Seq: seq + 2, Time: r.ScheduledAt, Kind: jobs.EventCompleted, Node: "w1", Job: r.Job, Run: r.ID, Attempt: r.Attempts[0].ID},
				}
				seq += 2
				return r, evs
			}
			flush := func(n int) {
				runs, evs := make([]jobs.Run, 0, n), make([]jobs.Event, 0, 2*n)
				for range n {
					r, e := next()
					runs, evs = append(runs, r), append(evs, e...)
				}
				idx++
				s.Archive(idx, runs, evs)
				if err := s.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			for range njobs * keep / perFlush { // retention full before timing
				flush(perFlush)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += perFlush {
				flush(min(perFlush, b.N-done))
			}
		})
	}
}

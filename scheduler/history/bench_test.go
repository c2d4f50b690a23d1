package history

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

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
				archiveNow(b, s, idx, batch)
				batch = nil
			}
		}
	}
	idx++
	archiveNow(b, s, idx, batch)
	return s, path
}

// BenchmarkStore_Archive reports the file's size per run kept, and the
// size of the pages written (the file without what bbolt allocated ahead).
func BenchmarkStore_Archive(b *testing.B) {
	for range b.N {
		s, path := benchStore(b, 1000, 100)
		b.ReportMetric(float64(fileSize(b, path))/100_000, "file-bytes/run")
		var pages int64
		if err := s.db.View(func(tx *bbolt.Tx) error { pages = tx.Size(); return nil }); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(pages)/100_000, "pages-bytes/run")
	}
}

// BenchmarkStore_KeptPerRun reports what history keeps per run for
// realistic runs (realisticRun: one to three attempts, a stdout or
// stderr tail of 100 to 300 bytes): the file's bytes (which bbolt grows
// in steps of up to 16 MiB ahead of need), the pages written (the file
// without that), those in use (without the free pages a file keeps for
// later writes), and the keys and values of the run and its two index
// entries.
func BenchmarkStore_KeptPerRun(b *testing.B) {
	const njobs, perJob = 200, 100
	for range b.N {
		path := filepath.Join(b.TempDir(), "history.db")
		s, _ := MustOpen(b, jobs.History{Runs: perJob}, path)
		rng := rand.New(rand.NewPCG(1, 2))
		idx := uint64(0)
		var batch []jobs.Run
		for i := range perJob {
			for j := range njobs {
				batch = append(batch, realisticRun(rng, fmt.Sprintf("job-%05d", j), t0.Add(time.Duration(i)*time.Minute), idx))
				if len(batch) == 120 { // a flush every 200 ms at 600 fires/s
					idx++
					archiveNow(b, s, idx, batch)
					batch = nil
				}
			}
		}
		idx++
		archiveNow(b, s, idx, batch)
		var kv, values int
		var pages, free int64
		err := s.db.View(func(tx *bbolt.Tx) error {
			pages = tx.Size()
			free = int64(tx.DB().Stats().FreePageN) * int64(tx.DB().Info().PageSize)
			for _, name := range [][]byte{bucketRuns, bucketByTime, bucketArchived} {
				err := tx.Bucket(name).ForEach(func(k, v []byte) error {
					kv += len(k) + len(v)
					values += len(v)
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(b.Context()); err != nil {
			b.Fatal(err)
		}
		const runs = njobs * perJob
		b.ReportMetric(float64(fileSize(b, path))/runs, "file-B/run")
		b.ReportMetric(float64(pages)/runs, "pages-B/run")
		b.ReportMetric(float64(pages-free)/runs, "used-B/run")
		b.ReportMetric(float64(kv)/runs, "kv-B/run")
		b.ReportMetric(float64(values)/runs, "value-B/run")
	}
}

func fileSize(b *testing.B, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
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
// finished run and its events (granted, completed) per op, committed in
// flushes of perFlush runs (at 600 fires/s, a flush every 200 ms holds
// 120 runs, one every second 600), into a store that already keeps its
// jobs' retention full.
//
// With realistic, the runs are realisticRun's, whose tails are most of
// what storing one costs. The case named lateness is what each server
// of `fencebench lateness -http -rates 1000` stores: 1,000 jobs, three
// events a run (a started one too), 200 runs a flush, and a retention
// the window never fills, so nothing is trimmed.
func BenchmarkStore_Steady(b *testing.B) {
	for _, c := range []struct {
		perFlush        int
		realistic       bool
		njobs, keep     int
		prefill, events int
		name            string
	}{
		{perFlush: 120, njobs: 600, keep: 20, prefill: 20, events: 2},
		{perFlush: 600, njobs: 600, keep: 20, prefill: 20, events: 2},
		{perFlush: 120, njobs: 600, keep: 20, prefill: 20, events: 2, realistic: true},
		{perFlush: 200, njobs: 1000, keep: 1000, prefill: 20, events: 3, name: "lateness"},
	} {
		perFlush, njobs := c.perFlush, c.njobs
		name := fmt.Sprintf("runs/flush=%d", perFlush)
		if c.realistic {
			name += "/realistic"
		}
		if c.name != "" {
			name = c.name
		}
		rng := rand.New(rand.NewPCG(3, 3))
		b.Run(name, func(b *testing.B) {
			s, _ := MustOpen(b, jobs.History{Runs: c.keep}, "")
			zero := 0
			seq, idx, sec := uint64(0), uint64(0), 0
			next := func() (jobs.Run, []jobs.Event) {
				j := int(seq/uint64(c.events)) % njobs
				if j == 0 {
					sec++
				}
				r := run(fmt.Sprintf("job-%05d", j), sec, jobs.Succeeded)
				r.Attempts = []jobs.Attempt{{ID: jobs.AttemptID(r.ID, 1), Number: 1, Token: jobs.Fence{Epoch: 3, Seq: seq + 1},
					Worker: "w1", State: jobs.Succeeded, GrantedAt: r.ScheduledAt, StartedAt: r.ScheduledAt, EndedAt: r.ScheduledAt.Add(time.Millisecond),
					ExitCode: &zero, StoreOutcome: "applied"}}
				if c.realistic {
					r = realisticRun(rng, r.Job, r.ScheduledAt, seq)
				}
				evs := []jobs.Event{
					{Seq: seq + 1, Time: r.ScheduledAt, Kind: jobs.EventGranted, Node: "w1", Job: r.Job, Run: r.ID, Attempt: r.Attempts[0].ID},
					{Seq: seq + 2, Time: r.ScheduledAt, Kind: jobs.EventCompleted, Node: "w1", Job: r.Job, Run: r.ID, Attempt: r.Attempts[0].ID},
				}
				if c.events == 3 {
					evs = append(evs, jobs.Event{Seq: seq + 3, Time: r.ScheduledAt, Kind: jobs.EventStarted, Node: "w1", Job: r.Job, Run: r.ID, Attempt: r.Attempts[0].ID})
				}
				seq += uint64(c.events)
				return r, evs
			}
			flush := func(n int) {
				runs, evs := make([]jobs.Run, 0, n), make([]jobs.Event, 0, c.events*n)
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
			for range njobs * c.prefill / perFlush { // prefill runs a job before timing
				flush(perFlush)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime(b)
			for done := 0; done < b.N; done += perFlush {
				flush(min(perFlush, b.N-done))
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/run")
		})
	}
}

// cpuTime is the CPU the process has used, user and system: on a machine
// other work keeps busy, what a run costs shows better in it than in the
// time that passed.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// archiveNow archives batch as applied at log index idx and commits it.
func archiveNow(b *testing.B, s *Store, idx uint64, batch []jobs.Run) {
	b.Helper()
	s.Archive(idx, batch, nil)
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
}

// Package history keeps the run history that outlives the replicated
// state: one bbolt file per server, fed by the scheduler's FSM with the
// finished runs and the events it trims from its bounded hot window.
//
// Why a file per server and not the Raft snapshot: the snapshot is sent
// whole to every follower that falls behind and is held in memory while
// written, so it must stay small; history grows with jobs × runs kept.
// Every server archives the same runs at the same log index (the FSM's
// trim is deterministic), so every server's file converges on the same
// history without a second consensus: writes are keyed by (job,
// scheduled time) and idempotent, so replaying the log after a restart
// changes nothing, and retention (newest N by scheduled time, none older
// than max_age) keeps the same runs wherever it is applied.
//
// The one thing replay cannot give back is what a server never applied:
// the entries a snapshot install skips. Store.Restored records such a
// range of log indexes as a gap, durably, and a gap-filling loop asks the
// other servers for what they archived in it (Store.Range answers only for
// ranges its own history covers) until the gap is closed.
//
// Writes are batched: Archive buffers what an entry trimmed, a flusher
// commits the buffer every FlushEvery in one transaction, and Sync (which
// the FSM calls before each Raft snapshot) commits it at once, so
// everything trimmed up to a snapshot's index is durable before the log
// entries behind it can be compacted away.
package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencecron/fencecron/jobs"
)

var (
	bucketRuns     = []byte("runs")
	bucketByTime   = []byte("bytime")
	bucketEvents   = []byte("events")
	bucketArchived = []byte("archived")
	bucketCounts   = []byte("counts")
	bucketMeta     = []byte("meta")

	metaThrough = []byte("through")
	metaGaps    = []byte("gaps")
	metaEvents  = []byte("events")
)

// Defaults of a Store's fields.
const (
	DefaultFlushEvery  = 200 * time.Millisecond
	DefaultMaxPending  = 20_000
	DefaultSweepEvery  = time.Minute
	DefaultSweepBudget = 10_000
	DefaultFillEvery   = 2 * time.Second
	DefaultMaxEvents   = 1_000_000
	// pageRecords bounds one page of a gap filling.
	pageRecords = 500
	// trimOnInsert bounds the runs one insert deletes; the sweep takes
	// the rest (after history.runs was lowered).
	trimOnInsert = 100
)

// Errors.
var (
	// ErrNotCovered: this server's history lacks part of the range asked
	// (it has a gap there, or has not archived that far).
	ErrNotCovered = errors.New("range not covered by this server's history")
	// ErrClosed: the store is not open.
	ErrClosed = errors.New("history store closed")
)

// Store is one server's history file. Set its fields, then Open; it is
// safe for concurrent use until Close.
type Store struct {
	// Path is the bbolt file.
	Path string
	// Default is the cluster's default retention (cluster.history).
	Default jobs.History
	// Retention returns a job's own history setting (its spec's), zero
	// fields resolved from Default here; nil: Default for every job.
	Retention func(job string) jobs.History
	// MaxEvents bounds the events kept, oldest dropped first; events
	// older than Default.MaxAge are dropped too.
	MaxEvents int
	// FlushEvery is how often buffered records are committed; MaxPending
	// how many may wait before Settle commits them at once.
	FlushEvery time.Duration
	MaxPending int
	// SweepEvery is how often retention by age (and by count, after it
	// was lowered) runs over what is stored, visiting at most SweepBudget
	// keys each time.
	SweepEvery  time.Duration
	SweepBudget int
	// Peers returns the other servers' addresses, and Fetch reads one
	// page of a range from one of them (scheduler/rpc); either nil: no
	// gap filling.
	Peers     func() []string
	Fetch     func(ctx context.Context, peer string, req RangeRequest) (RangePage, error)
	FillEvery time.Duration
	Clock     jobs.Clock
	Logger    *slog.Logger

	db *bbolt.DB

	mu      sync.Mutex // guards pending and applied
	pending []item
	applied uint64

	// wmu serializes the writers (flush, restore, gap filling, sweep) and
	// guards through and gaps, the durable coverage.
	wmu       sync.Mutex
	through   uint64
	gaps      []Range
	sweepFrom []byte

	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// item is one record waiting in the buffer: a run or an event, and the
// index of the entry that archived it.
type item struct {
	index uint64
	run   *jobs.Run
	event *jobs.Event
}

// Open opens (creating) the file, reads its coverage and starts the
// flusher, the sweeper and the gap-filling loop.
func (s *Store) Open() error {
	if s.FlushEvery <= 0 {
		s.FlushEvery = DefaultFlushEvery
	}
	if s.MaxPending <= 0 {
		s.MaxPending = DefaultMaxPending
	}
	if s.SweepEvery <= 0 {
		s.SweepEvery = DefaultSweepEvery
	}
	if s.SweepBudget <= 0 {
		s.SweepBudget = DefaultSweepBudget
	}
	if s.FillEvery <= 0 {
		s.FillEvery = DefaultFillEvery
	}
	if s.MaxEvents <= 0 {
		s.MaxEvents = DefaultMaxEvents
	}
	if s.Clock == nil {
		s.Clock = jobs.SystemClock{}
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	s.Default = s.Default.Resolve(jobs.DefaultHistory)
	db, err := bbolt.Open(s.Path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("open history %s: %w", s.Path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bucketRuns, bucketByTime, bucketEvents, bucketArchived, bucketCounts, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		if v := m.Get(metaThrough); len(v) == 8 {
			s.through = binary.BigEndian.Uint64(v)
		}
		if v := m.Get(metaGaps); v != nil {
			if err := json.Unmarshal(v, &s.gaps); err != nil {
				return fmt.Errorf("gaps: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return fmt.Errorf("open history %s: %w", s.Path, err)
	}
	s.db = db
	s.applied = s.through
	s.kick = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(3)
	go s.flushLoop(ctx)
	go s.sweepLoop(ctx)
	go s.fillGapsLoop(ctx)
	return nil
}

// Close stops the loops, commits what is buffered and closes the file.
func (s *Store) Close(ctx context.Context) error {
	if s.db == nil {
		return nil
	}
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("close history: %w", ctx.Err())
	}
	err := s.Flush()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// Archive buffers what the log entry at index trimmed from the
// replicated state. The FSM calls it for every entry it applies (with
// nothing when it trimmed nothing), under its own lock: it never blocks
// and never calls back.
func (s *Store) Archive(index uint64, runs []jobs.Run, events []jobs.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index > s.applied {
		s.applied = index
	}
	for i := range runs {
		s.pending = append(s.pending, item{index: index, run: &runs[i]})
	}
	for i := range events {
		s.pending = append(s.pending, item{index: index, event: &events[i]})
	}
}

// Settle commits the buffer now if it holds more than MaxPending records:
// the FSM calls it after each entry, outside its lock, so a slow disk
// slows the log down rather than the buffer growing without bound.
func (s *Store) Settle() {
	s.mu.Lock()
	over := len(s.pending) > s.MaxPending
	s.mu.Unlock()
	if over {
		if err := s.Flush(); err != nil {
			s.Logger.Error("history: commit", "err", err)
		}
	}
}

// Sync commits everything archived so far; the FSM calls it before a
// snapshot, whose index the log may then be compacted to.
func (s *Store) Sync() error { return s.Flush() }

// Restored is called when the FSM restored a snapshot of index: if this
// history has not archived that far, the range in between was skipped by
// the snapshot and is recorded, durably, as a gap to gap filling.
func (s *Store) Restored(index uint64) error {
	if err := s.Flush(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if index > s.applied {
		s.applied = index
	}
	s.mu.Unlock()
	if index <= s.through {
		return nil
	}
	gaps := AddGap(s.gaps, Range{From: s.through, To: index})
	if err := s.db.Update(func(tx *bbolt.Tx) error { return putCoverage(tx, index, gaps) }); err != nil {
		return fmt.Errorf("history: record gap: %w", err)
	}
	s.Logger.Info("history: a snapshot skipped log entries; filling their history from a peer", "gap", Range{From: s.through, To: index}.String())
	s.through, s.gaps = index, gaps
	return nil
}

func putCoverage(tx *bbolt.Tx, through uint64, gaps []Range) error {
	m := tx.Bucket(bucketMeta)
	if err := m.Put(metaThrough, u64(through)); err != nil {
		return err
	}
	return m.Put(metaGaps, marshal(gaps))
}

// Coverage returns the index up to which this history has archived
// everything, and the gaps in it still to gap filling.
func (s *Store) Coverage() (through uint64, gaps []Range) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.through, append([]Range(nil), s.gaps...)
}

// Flush commits the buffer in one transaction.
func (s *Store) Flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	batch, applied := s.pending, s.applied
	s.pending = nil
	s.mu.Unlock()
	if len(batch) == 0 && applied <= s.through {
		return nil
	}
	now := s.Clock.Now()
	through := max(s.through, applied)
	err := s.db.Update(func(tx *bbolt.Tx) error {
		packPages(tx)
		for _, it := range batch {
			var err error
			if it.run != nil {
				err = s.insertRun(tx, runRecord{Index: it.index, Run: *it.run}, now)
			} else {
				err = s.insertEvent(tx, eventRecord{Index: it.index, Event: *it.event}, now)
			}
			if err != nil {
				return err
			}
		}
		return putCoverage(tx, through, s.gaps)
	})
	if err != nil {
		// Keep the batch for the next try, ahead of what came since.
		s.mu.Lock()
		s.pending = append(batch, s.pending...)
		s.mu.Unlock()
		return fmt.Errorf("history: commit %d records: %w", len(batch), err)
	}
	s.through = through
	return nil
}

// pageFill is how full bbolt leaves a page it splits in the buckets that
// grow with the runs kept. Its default, half, suits keys written in any
// order; ours arrive mostly in order (archived and bytime by index and
// time, runs by time within each job), so the first half of a split
// would stay half empty for good, and the file twice the size of what it
// holds.
var pageFill = 0.9

// packPages sets pageFill on the buckets that grow, for one write
// transaction (bbolt keeps the setting per transaction).
func packPages(tx *bbolt.Tx) {
	for _, b := range [][]byte{bucketRuns, bucketByTime, bucketArchived, bucketEvents} {
		tx.Bucket(b).FillPercent = pageFill
	}
}

// retention returns job's resolved retention.
func (s *Store) retention(job string) jobs.History {
	def := s.Default.Resolve(jobs.DefaultHistory)
	if s.Retention == nil {
		return def
	}
	return s.Retention(job).Resolve(def)
}

// insertRun stores a finished run unless retention would drop it at
// once, then trims the job to its count. Storing a run already stored
// changes nothing.
func (s *Store) insertRun(tx *bbolt.Tx, rec runRecord, now time.Time) error {
	r := rec.Run
	h := s.retention(r.Job)
	if Expired(r.ScheduledAt, h, now) {
		return nil
	}
	runs := tx.Bucket(bucketRuns)
	k := runKey(r.Job, r.ScheduledAt)
	if runs.Get(k) != nil {
		return nil
	}
	// Only a run older than the job's newest needs counting: it is kept
	// if fewer than h.Runs are newer.
	prefix := jobPrefix(r.Job)
	c := runs.Cursor()
	newer := 0
	for ck, _ := c.Seek(k); ck != nil && bytes.HasPrefix(ck, prefix) && newer < h.Runs; ck, _ = c.Next() {
		newer++
	}
	if newer >= h.Runs {
		return nil
	}
	if err := runs.Put(k, encodeRun(rec)); err != nil {
		return err
	}
	if err := tx.Bucket(bucketByTime).Put(timeKey(r.Job, r.ScheduledAt), nil); err != nil {
		return err
	}
	if err := tx.Bucket(bucketArchived).Put(archivedKey(rec.Index, kindRun, k), nil); err != nil {
		return err
	}
	n, err := addCount(tx, r.Job, 1)
	if err != nil {
		return err
	}
	_, err = s.trimCount(tx, r.Job, n, h, trimOnInsert)
	return err
}

// addCount adds d to the job's count and returns the new count.
func addCount(tx *bbolt.Tx, job string, d int64) (int64, error) {
	b := tx.Bucket(bucketCounts)
	var n int64
	if v := b.Get([]byte(job)); len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n = max(n+d, 0)
	if n == 0 {
		return 0, b.Delete([]byte(job))
	}
	return n, b.Put([]byte(job), u64(uint64(n)))
}

// trimCount deletes the job's oldest runs beyond h.Runs, at most budget
// of them; it returns how many it deleted.
func (s *Store) trimCount(tx *bbolt.Tx, job string, n int64, h jobs.History, budget int) (int, error) {
	over := int(n) - h.Runs
	if over <= 0 {
		return 0, nil
	}
	over = min(over, budget)
	prefix := jobPrefix(job)
	c := tx.Bucket(bucketRuns).Cursor()
	var doomed [][]byte
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(doomed) < over; k, _ = c.Next() {
		doomed = append(doomed, bytes.Clone(k))
	}
	for _, k := range doomed {
		if err := deleteRun(tx, k); err != nil {
			return 0, err
		}
	}
	return len(doomed), nil
}

// deleteRun removes a run and its index entries.
func deleteRun(tx *bbolt.Tx, k []byte) error {
	runs := tx.Bucket(bucketRuns)
	v := runs.Get(k)
	if v == nil {
		return nil
	}
	index, err := recordIndex(v)
	if err != nil {
		return err
	}
	job, at, _ := splitRunKey(k)
	if err := tx.Bucket(bucketArchived).Delete(archivedKey(index, kindRun, k)); err != nil {
		return err
	}
	if err := tx.Bucket(bucketByTime).Delete(timeKey(job, at)); err != nil {
		return err
	}
	if err := runs.Delete(k); err != nil {
		return err
	}
	_, err = addCount(tx, job, -1)
	return err
}

// insertEvent stores an event unless it is past the default max_age,
// then drops the oldest beyond MaxEvents.
func (s *Store) insertEvent(tx *bbolt.Tx, rec eventRecord, now time.Time) error {
	if Expired(rec.Event.Time, s.Default, now) {
		return nil
	}
	evs := tx.Bucket(bucketEvents)
	k := u64(rec.Event.Seq)
	if evs.Get(k) != nil {
		return nil
	}
	if err := evs.Put(k, marshal(rec)); err != nil {
		return err
	}
	if err := tx.Bucket(bucketArchived).Put(archivedKey(rec.Index, kindEvent, k), nil); err != nil {
		return err
	}
	m := tx.Bucket(bucketMeta)
	var n uint64
	if v := m.Get(metaEvents); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	n++
	for n > uint64(s.MaxEvents) {
		k, _ := evs.Cursor().First()
		if k == nil {
			break
		}
		if err := deleteEvent(tx, k); err != nil {
			return err
		}
		n--
	}
	return m.Put(metaEvents, u64(n))
}

func deleteEvent(tx *bbolt.Tx, k []byte) error {
	evs := tx.Bucket(bucketEvents)
	v := evs.Get(k)
	if v == nil {
		return nil
	}
	index, err := recordIndex(v)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketArchived).Delete(archivedKey(index, kindEvent, k)); err != nil {
		return err
	}
	return evs.Delete(k)
}

func (s *Store) flushLoop(ctx context.Context) {
	defer s.wg.Done()
	for {
		t := s.Clock.NewTimer(s.FlushEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if err := s.Flush(); err != nil {
			s.Logger.Error("history: commit", "err", err)
		}
	}
}

func (s *Store) sweepLoop(ctx context.Context) {
	defer s.wg.Done()
	for {
		t := s.Clock.NewTimer(s.SweepEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if _, err := s.Sweep(); err != nil {
			s.Logger.Error("history: sweep", "err", err)
		}
	}
}

// Sweep applies retention to what is stored: runs past their job's
// max_age or beyond its count, events past the default max_age. It
// visits at most SweepBudget runs, continuing where the last sweep
// stopped, and SweepBudget events, and returns how many records it
// deleted.
func (s *Store) Sweep() (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	now := s.Clock.Now()
	deleted := 0
	err := s.db.Update(func(tx *bbolt.Tx) error {
		packPages(tx)
		budget := s.SweepBudget
		c := tx.Bucket(bucketRuns).Cursor()
		k, _ := c.Seek(s.sweepFrom)
		for k != nil && budget > 0 {
			job, _, ok := splitRunKey(k)
			if !ok {
				return fmt.Errorf("bad run key %q", k)
			}
			h := s.retention(job)
			prefix := jobPrefix(job)
			var doomed [][]byte
			for ; k != nil && bytes.HasPrefix(k, prefix) && budget > 0; k, _ = c.Next() {
				budget--
				if _, at, _ := splitRunKey(k); !Expired(at, h, now) {
					break
				}
				doomed = append(doomed, bytes.Clone(k))
			}
			for _, d := range doomed {
				if err := deleteRun(tx, d); err != nil {
					return err
				}
			}
			deleted += len(doomed)
			var n int64
			if v := tx.Bucket(bucketCounts).Get([]byte(job)); len(v) == 8 {
				n = int64(binary.BigEndian.Uint64(v))
			}
			d, err := s.trimCount(tx, job, n, h, budget)
			if err != nil {
				return err
			}
			deleted, budget = deleted+d, budget-d
			if budget <= 0 {
				// Out of budget within this job: the next sweep starts here.
				s.sweepFrom = prefix
				break
			}
			// On to the next job (names never hold a byte below '-').
			s.sweepFrom = append([]byte(job), 1)
			c = tx.Bucket(bucketRuns).Cursor()
			k, _ = c.Seek(s.sweepFrom)
		}
		if k == nil {
			s.sweepFrom = nil
		}
		// Events: oldest first, as many as the budget again.
		budget = s.SweepBudget
		evc := tx.Bucket(bucketEvents).Cursor()
		var doomed [][]byte
		for k, v := evc.First(); k != nil && budget > 0; k, v = evc.Next() {
			budget--
			var rec eventRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			if !Expired(rec.Event.Time, s.Default, now) {
				break
			}
			doomed = append(doomed, bytes.Clone(k))
		}
		for _, k := range doomed {
			if err := deleteEvent(tx, k); err != nil {
				return err
			}
		}
		if len(doomed) > 0 {
			m := tx.Bucket(bucketMeta)
			var n uint64
			if v := m.Get(metaEvents); len(v) == 8 {
				n = binary.BigEndian.Uint64(v)
			}
			n -= min(n, uint64(len(doomed)))
			if err := m.Put(metaEvents, u64(n)); err != nil {
				return err
			}
		}
		deleted += len(doomed)
		return nil
	})
	return deleted, err
}

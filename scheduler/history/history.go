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
	s.pending = make([]item, 0, len(batch)) // the next is about as long: no growing it
	s.mu.Unlock()
	if len(batch) == 0 && applied <= s.through {
		return nil
	}
	now := s.Clock.Now()
	through := max(s.through, applied)
	err := s.update(func(w *writes) error {
		for _, it := range batch {
			var err error
			if it.run != nil {
				err = s.insertRun(w, runRecord{Index: it.index, Run: *it.run}, now)
			} else {
				err = s.insertEvent(w, eventRecord{Index: it.index, Event: *it.event}, now)
			}
			if err != nil {
				return err
			}
		}
		return putCoverage(w.tx, through, s.gaps)
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

// writes is one write transaction of records. It reads each count it
// changes (a job's runs, the events) once and writes it once, when the
// transaction ends, however many records it stores and deletes: at 1,000
// runs a second, reading and writing counts for every record was a tenth
// of what a server spent on its history.
type writes struct {
	tx      *bbolt.Tx
	counts  map[string]int64
	changed map[string]bool // the jobs whose count changed
	events  int64           // -1 until read
	// eventsChanged: events differs from what was read.
	eventsChanged bool
	// lastEvent is the key after the newest event stored (nil until
	// read): events arrive in order, and one at or past it cannot be
	// stored already.
	lastEvent []byte
}

func newWrites(tx *bbolt.Tx) *writes {
	return &writes{tx: tx, counts: map[string]int64{}, changed: map[string]bool{}, events: -1}
}

// eventStored reports whether the event under k is stored.
func (w *writes) eventStored(k []byte) bool {
	if w.lastEvent == nil {
		last, _ := w.tx.Bucket(bucketEvents).Cursor().Last()
		w.lastEvent = append(bytes.Clone(last), 0)
	}
	return bytes.Compare(k, w.lastEvent) < 0 && w.tx.Bucket(bucketEvents).Get(k) != nil
}

// count returns how many runs job has here.
func (w *writes) count(job string) int64 {
	if n, ok := w.counts[job]; ok {
		return n
	}
	var n int64
	if v := w.tx.Bucket(bucketCounts).Get([]byte(job)); len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	w.counts[job] = n
	return n
}

func (w *writes) addCount(job string, d int64) {
	w.counts[job] = max(w.count(job)+d, 0)
	w.changed[job] = true
}

// eventCount returns how many events are kept here.
func (w *writes) eventCount() int64 {
	if w.events < 0 {
		w.events = 0
		if v := w.tx.Bucket(bucketMeta).Get(metaEvents); len(v) == 8 {
			w.events = int64(binary.BigEndian.Uint64(v))
		}
	}
	return w.events
}

func (w *writes) addEvents(d int64) {
	w.events = max(w.eventCount()+d, 0)
	w.eventsChanged = true
}

// close writes the counts that changed (a sweep reads every job's it
// visits, and may delete nothing).
func (w *writes) close() error {
	b := w.tx.Bucket(bucketCounts)
	for job := range w.changed {
		n := w.counts[job]
		var err error
		if n == 0 {
			err = b.Delete([]byte(job))
		} else {
			err = b.Put([]byte(job), u64(uint64(n)))
		}
		if err != nil {
			return err
		}
	}
	if w.eventsChanged {
		return w.tx.Bucket(bucketMeta).Put(metaEvents, u64(uint64(w.events)))
	}
	return nil
}

// update runs fn in a write transaction, with the buckets that grow
// packed (packPages) and the counts written when fn succeeds.
func (s *Store) update(fn func(w *writes) error) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		packPages(tx)
		w := newWrites(tx)
		if err := fn(w); err != nil {
			return err
		}
		return w.close()
	})
}

// insertRun stores a finished run unless retention would drop it at
// once, then trims the job to its count. Storing a run already stored
// changes nothing.
func (s *Store) insertRun(w *writes, rec runRecord, now time.Time) error {
	r := rec.Run
	h := s.retention(r.Job)
	if Expired(r.ScheduledAt, h, now) {
		return nil
	}
	runs := w.tx.Bucket(bucketRuns)
	k := runKey(r.Job, r.ScheduledAt)
	c := runs.Cursor()
	ck, _ := c.Seek(k)
	if bytes.Equal(ck, k) {
		return nil
	}
	// Only a run older than the job's newest needs counting: it is kept
	// if fewer than h.Runs are newer.
	prefix := jobPrefix(r.Job)
	newer := 0
	for ; ck != nil && bytes.HasPrefix(ck, prefix) && newer < h.Runs; ck, _ = c.Next() {
		newer++
	}
	if newer >= h.Runs {
		return nil
	}
	if err := runs.Put(k, encodeRun(rec)); err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketByTime).Put(timeKey(r.Job, r.ScheduledAt), nil); err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketArchived).Put(archivedKey(rec.Index, kindRun, k), nil); err != nil {
		return err
	}
	w.addCount(r.Job, 1)
	_, err := s.trimCount(w, r.Job, h, trimOnInsert)
	return err
}

// trimCount deletes the job's oldest runs beyond h.Runs, at most budget
// of them; it returns how many it deleted.
func (s *Store) trimCount(w *writes, job string, h jobs.History, budget int) (int, error) {
	over := int(w.count(job)) - h.Runs
	if over <= 0 {
		return 0, nil
	}
	over = min(over, budget)
	prefix := jobPrefix(job)
	c := w.tx.Bucket(bucketRuns).Cursor()
	type doomed struct {
		k     []byte
		index uint64
	}
	var ds []doomed
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(ds) < over; k, v = c.Next() {
		index, err := recordIndex(v)
		if err != nil {
			return 0, err
		}
		ds = append(ds, doomed{bytes.Clone(k), index})
	}
	for _, d := range ds {
		if err := removeRun(w, d.k, d.index); err != nil {
			return 0, err
		}
	}
	return len(ds), nil
}

// deleteRun removes a run and its index entries.
func deleteRun(w *writes, k []byte) error {
	v := w.tx.Bucket(bucketRuns).Get(k)
	if v == nil {
		return nil
	}
	index, err := recordIndex(v)
	if err != nil {
		return err
	}
	return removeRun(w, k, index)
}

// removeRun removes the run stored under k, archived at index, and its
// index entries.
func removeRun(w *writes, k []byte, index uint64) error {
	job, at, _ := splitRunKey(k)
	if err := w.tx.Bucket(bucketArchived).Delete(archivedKey(index, kindRun, k)); err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketByTime).Delete(timeKey(job, at)); err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketRuns).Delete(k); err != nil {
		return err
	}
	w.addCount(job, -1)
	return nil
}

// insertEvent stores an event unless it is past the default max_age,
// then drops the oldest beyond MaxEvents.
func (s *Store) insertEvent(w *writes, rec eventRecord, now time.Time) error {
	if Expired(rec.Event.Time, s.Default, now) {
		return nil
	}
	evs := w.tx.Bucket(bucketEvents)
	k := u64(rec.Event.Seq)
	if w.eventStored(k) {
		return nil
	}
	if err := evs.Put(k, encodeEvent(rec)); err != nil {
		return err
	}
	if bytes.Compare(k, w.lastEvent) >= 0 {
		w.lastEvent = append(k[:len(k):len(k)], 0)
	}
	if err := w.tx.Bucket(bucketArchived).Put(archivedKey(rec.Index, kindEvent, k), nil); err != nil {
		return err
	}
	w.addEvents(1)
	for w.eventCount() > int64(s.MaxEvents) {
		k, v := evs.Cursor().First()
		if k == nil {
			break
		}
		if err := removeEvent(w, bytes.Clone(k), v); err != nil {
			return err
		}
	}
	return nil
}

// deleteEvent removes the event stored under k and its index entry.
func deleteEvent(w *writes, k []byte) error {
	v := w.tx.Bucket(bucketEvents).Get(k)
	if v == nil {
		return nil
	}
	return removeEvent(w, k, v)
}

// removeEvent removes the event v stored under k and its index entry.
func removeEvent(w *writes, k, v []byte) error {
	index, err := recordIndex(v)
	if err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketArchived).Delete(archivedKey(index, kindEvent, k)); err != nil {
		return err
	}
	if err := w.tx.Bucket(bucketEvents).Delete(k); err != nil {
		return err
	}
	w.addEvents(-1)
	return nil
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
	err := s.update(func(w *writes) error {
		tx := w.tx
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
				if err := deleteRun(w, d); err != nil {
					return err
				}
			}
			deleted += len(doomed)
			d, err := s.trimCount(w, job, h, budget)
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
			rec, err := decodeEvent(v)
			if err != nil {
				return err
			}
			if !Expired(rec.Event.Time, s.Default, now) {
				break
			}
			doomed = append(doomed, bytes.Clone(k))
		}
		for _, k := range doomed {
			if err := deleteEvent(w, k); err != nil {
				return err
			}
		}
		deleted += len(doomed)
		return nil
	})
	return deleted, err
}

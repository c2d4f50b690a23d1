// Package bolt is the embedded fenced store: one bbolt file, fsync-durable,
// with group commit so parallel writers share one fsync.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencecron/fencecron/fencedstore"
)

// Buckets. meta and body hold the live keys; the others serve versions
// and retention (retention.go):
//
//	versions   key NUL version -> an earlier body with its state
//	touched    time NUL key -> nil: live keys by last accepted change
//	tombstones key -> record of a deleted key (Meta.Deleted set)
//	tombtime   time NUL key -> nil: tombstones by deletion time
//	floors     rule prefix -> the greatest token of its dropped tombstones
//	job_floors job -> its floor (RaiseFloor): no token of the job up to it writes
var (
	bucketMeta   = []byte("meta")
	bucketBody   = []byte("body")
	bucketHist   = []byte("history")
	bucketVers   = []byte("versions")
	bucketTouch  = []byte("touched")
	bucketTomb   = []byte("tombstones")
	bucketTombAt = []byte("tombtime")
	bucketFloors = []byte("floors")
	bucketJobs   = []byte("job_floors")
	allBuckets   = [][]byte{bucketMeta, bucketBody, bucketHist, bucketVers, bucketTouch, bucketTomb, bucketTombAt, bucketFloors, bucketJobs}
)

// maxBatch bounds how many calls share one transaction.
const maxBatch = 256

// Store is a fencedstore.Store in a bbolt file.
type Store struct {
	// Path is the database file.
	Path string
	// MaxBodyBytes caps a published body (default
	// fencedstore.DefaultMaxBodyBytes, 16 MiB).
	MaxBodyBytes int64
	// HistoryRetention is how many decisions each key keeps (default 1000).
	HistoryRetention int
	// KeepVersions is how many bodies each key keeps, the current one
	// included (default fencedstore.DefaultKeepVersions).
	KeepVersions int
	// Now is the clock stamped on decisions.
	Now func() time.Time

	db  *bbolt.DB
	ops chan *op
	// sweepAt is where each rule's sweep goes on in the touched index
	// (see SweepRule), under sweepMu.
	sweepMu sync.Mutex
	sweepAt map[string][]byte
	// scopes serialize calls with a quota (quota.go).
	scopes  scopeLocks
	closing chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

var _ fencedstore.Store = (*Store)(nil)

// New returns a store for the file at path; call Open before use.
func New(path string) *Store {
	return &Store{
		Path:             path,
		MaxBodyBytes:     fencedstore.DefaultMaxBodyBytes,
		HistoryRetention: fencedstore.DefaultHistoryRetention,
		KeepVersions:     fencedstore.DefaultKeepVersions,
		Now:              time.Now,
	}
}

// Open opens (creating if needed) the file and starts the committer.
func (s *Store) Open() error {
	if s.HistoryRetention < 1 {
		return fmt.Errorf("history retention must be at least 1, got %d", s.HistoryRetention)
	}
	if s.KeepVersions < 1 || s.KeepVersions > fencedstore.MaxKeepVersions {
		return fmt.Errorf("keep versions must be from 1 to %d, got %d", fencedstore.MaxKeepVersions, s.KeepVersions)
	}
	db, err := bbolt.Open(s.Path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("open store %s: %w", s.Path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		index := tx.Bucket(bucketTouch) == nil
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if index {
			// A file from before retention: index its keys once.
			return indexTouched(tx)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return fmt.Errorf("open store %s: %w", s.Path, err)
	}
	s.db = db
	s.ops = make(chan *op)
	s.closing = make(chan struct{})
	s.wg.Add(1)
	go s.commitLoop()
	return nil
}

// Close stops accepting writes, waits for the committer and closes the file.
func (s *Store) Close() error {
	if s.db == nil {
		return nil
	}
	var err error
	s.once.Do(func() {
		close(s.closing)
		s.wg.Wait()
		err = s.db.Close()
	})
	return err
}

// op is one Publish, Establish or RaiseFloor waiting for the committer.
type op struct {
	establish bool
	// floor, if set, makes the op a RaiseFloor of req.Job to req.Token.
	floor bool
	req   fencedstore.PublishRequest // an establish's or a floor's fields, for one
	hash  string

	res  fencedstore.Result
	err  error
	done chan struct{}
}

// record is what the meta bucket holds per key (and the tombstones
// bucket per deleted key).
type record struct {
	fencedstore.Meta
	HistFirst uint64 `json:"hist_first"` // oldest retained history entry
	HistNext  uint64 `json:"hist_next"`  // next history entry
	// Touched is the last accepted change (write or establish): a key's
	// age for retention. Zero in a file from before retention: such a
	// key is indexed by Updated on first sweep (see retention.go).
	Touched time.Time `json:"touched,omitzero"`
	// DeletedBy is the prefix of the rule that deleted a tombstone.
	DeletedBy string `json:"deleted_by,omitempty"`
}

// Establish implements fencedstore.Store.
func (s *Store) Establish(ctx context.Context, req fencedstore.EstablishRequest) (fencedstore.Result, error) {
	if err := fencedstore.ValidateCall(req.Key, req.Token, req.Expires); err != nil {
		return fencedstore.Result{}, err
	}
	unlock, err := s.withinQuota(ctx, req.Quota, req.Key, false, 0)
	if err != nil {
		return fencedstore.Result{}, fmt.Errorf("establish %s: %w", req.Key, err)
	}
	defer unlock()
	return s.submit(ctx, &op{establish: true, req: fencedstore.PublishRequest{Key: req.Key, Token: req.Token, Attempt: req.Attempt, Job: req.Job, Expires: req.Expires}})
}

// RaiseFloor implements fencedstore.Store. It goes through the
// committer like every write, so it is ordered with them: a call decided
// after it sees the new floor.
func (s *Store) RaiseFloor(ctx context.Context, job string, tok fencedstore.Token) (fencedstore.Token, error) {
	if err := fencedstore.ValidateFloor(job, tok); err != nil {
		return fencedstore.Token{}, err
	}
	res, err := s.submit(ctx, &op{floor: true, req: fencedstore.PublishRequest{Job: job, Token: tok}})
	return res.Floor, err
}

// jobFloor returns job's floor (zero: none, or no job).
func jobFloor(tx *bbolt.Tx, job string) (fencedstore.Token, error) {
	var t fencedstore.Token
	if job == "" {
		return t, nil
	}
	v := tx.Bucket(bucketJobs).Get([]byte(job))
	if v == nil {
		return t, nil
	}
	if err := json.Unmarshal(v, &t); err != nil {
		return t, fmt.Errorf("decode the floor of job %s: %w", job, err)
	}
	return t, nil
}

// applyFloor raises a job's floor inside tx.
func (s *Store) applyFloor(tx *bbolt.Tx, o *op) error {
	cur, err := jobFloor(tx, o.req.Job)
	if err != nil {
		return err
	}
	next := fencedstore.RaiseTo(cur, o.req.Token)
	if next != cur {
		if err := putJSON(tx.Bucket(bucketJobs), []byte(o.req.Job), next); err != nil {
			return err
		}
	}
	o.res = fencedstore.Result{Floor: next}
	return nil
}

// Publish implements fencedstore.Store.
func (s *Store) Publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	if err := fencedstore.ValidateCall(req.Key, req.Token, req.Expires); err != nil {
		return fencedstore.Result{}, err
	}
	if int64(len(req.Body)) > s.MaxBodyBytes {
		return fencedstore.Result{}, fmt.Errorf("publish %s: %w: %d bytes, limit %d", req.Key, fencedstore.ErrTooLarge, len(req.Body), s.MaxBodyBytes)
	}
	unlock, err := s.withinQuota(ctx, req.Quota, req.Key, true, int64(len(req.Body)))
	if err != nil {
		return fencedstore.Result{}, fmt.Errorf("publish %s: %w", req.Key, err)
	}
	defer unlock()
	return s.submit(ctx, &op{req: req, hash: fencedstore.Hash(req.Body)})
}

// submit hands o to the committer and waits for its decision. Once handed
// over, the call is decided even if ctx ends, so submit waits for it: a
// caller must never be told "failed" about a write that was applied.
func (s *Store) submit(ctx context.Context, o *op) (fencedstore.Result, error) {
	o.done = make(chan struct{})
	select {
	case s.ops <- o:
	case <-s.closing:
		return fencedstore.Result{}, fencedstore.ErrClosed
	case <-ctx.Done():
		return fencedstore.Result{}, ctx.Err()
	}
	<-o.done
	return o.res, o.err
}

// commitLoop is the group commit: it takes every call that is waiting,
// decides them in order in one transaction, and fsyncs once for all.
func (s *Store) commitLoop() {
	defer s.wg.Done()
	batch := make([]*op, 0, maxBatch)
	for {
		select {
		case o := <-s.ops:
			batch = append(batch[:0], o)
		case <-s.closing:
			return
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
				break gather
			}
		}
		err := s.db.Update(func(tx *bbolt.Tx) error {
			for _, o := range batch {
				if err := s.apply(tx, o); err != nil {
					return err
				}
			}
			return nil
		})
		for _, o := range batch {
			if err != nil {
				what := o.req.Key
				if o.floor {
					what = "floor of job " + o.req.Job
				}
				o.res, o.err = fencedstore.Result{}, fmt.Errorf("commit %s: %w", what, err)
			}
			close(o.done)
		}
	}
}

// apply decides one call inside tx. It returns an error only for failures
// that must abort the whole transaction.
func (s *Store) apply(tx *bbolt.Tx, o *op) error {
	if o.floor {
		return s.applyFloor(tx, o)
	}
	key := []byte(o.req.Key)
	now := s.Now().UTC()
	floor, err := jobFloor(tx, o.req.Job)
	if err != nil {
		return err
	}
	rec, live, err := s.loadForCall(tx, key, now)
	if err != nil {
		return err
	}
	rec.Key = o.req.Key
	before := rec
	var d fencedstore.Decision
	if o.establish {
		rec.Meta, d = fencedstore.DecideEstablish(rec.Meta, floor, fencedstore.EstablishRequest{Key: o.req.Key, Token: o.req.Token, Attempt: o.req.Attempt, Job: o.req.Job, Expires: o.req.Expires}, now)
	} else {
		rec.Meta, d = fencedstore.DecidePublish(rec.Meta, floor, o.req, o.hash, now)
	}
	if d.Outcome == fencedstore.Established || (d.Outcome == fencedstore.Applied && rec.Version != before.Version) {
		rec.Touched = now
	}
	if err := s.appendHistory(tx, key, &rec, d); err != nil {
		return err
	}
	if err := s.store(tx, key, before, live, &rec, o.req.Body); err != nil {
		return err
	}
	o.res = fencedstore.Result{Outcome: d.Outcome, Key: o.req.Key, Version: rec.Version, Greatest: rec.Greatest, Floor: d.Floor}
	o.err = d.Err()
	return nil
}

// loadForCall returns the record a call on key is decided on: the live
// key, else its tombstone, else (a key with no record) a new tombstone
// holding the floor of its prefix if there is one, whose Deleted decision
// is already in its history. live reports the first case.
func (s *Store) loadForCall(tx *bbolt.Tx, key []byte, now time.Time) (rec record, live bool, err error) {
	if v := tx.Bucket(bucketMeta).Get(key); v != nil {
		err = json.Unmarshal(v, &rec)
		return rec, true, err
	}
	if v := tx.Bucket(bucketTomb).Get(key); v != nil {
		err = json.Unmarshal(v, &rec)
		return rec, false, err
	}
	floor, prefix, err := floorOf(tx, string(key))
	if err != nil || floor.IsZero() {
		return rec, false, err
	}
	rec.Meta = fencedstore.Meta{Key: string(key), Greatest: floor}
	var d fencedstore.Decision
	rec.Meta, d = fencedstore.DecideDelete(rec.Meta, now)
	rec.DeletedBy = prefix
	if err := tx.Bucket(bucketTombAt).Put(timeKey(now, key), nil); err != nil {
		return rec, false, err
	}
	return rec, false, s.appendHistory(tx, key, &rec, d)
}

// store writes a decided record: a tombstone stays in the tombstones
// bucket; a live key (or one a newer token brought back) goes to meta,
// with its body, its earlier body kept as a version, and its place in the
// touched index.
func (s *Store) store(tx *bbolt.Tx, key []byte, before record, live bool, rec *record, body []byte) error {
	if !rec.Deleted.IsZero() {
		return putJSON(tx.Bucket(bucketTomb), key, rec)
	}
	if !live && !before.Deleted.IsZero() {
		// Brought back: the tombstone goes.
		if err := tx.Bucket(bucketTomb).Delete(key); err != nil {
			return err
		}
		if err := tx.Bucket(bucketTombAt).Delete(timeKey(before.Deleted, key)); err != nil {
			return err
		}
		rec.DeletedBy = ""
	}
	if rec.Version != before.Version {
		if live && before.Version > 0 {
			if err := s.keepVersion(tx, key, before.Meta); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketBody).Put(key, body); err != nil {
			return err
		}
	}
	if !rec.Touched.Equal(before.Touched) || !live {
		if live {
			if err := tx.Bucket(bucketTouch).Delete(timeKey(touchedOf(before), key)); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketTouch).Put(timeKey(touchedOf(*rec), key), nil); err != nil {
			return err
		}
	}
	return putJSON(tx.Bucket(bucketMeta), key, rec)
}

func (s *Store) appendHistory(tx *bbolt.Tx, key []byte, rec *record, d fencedstore.Decision) error {
	b := tx.Bucket(bucketHist)
	if err := putJSON(b, histKey(key, rec.HistNext), d); err != nil {
		return err
	}
	rec.HistNext++
	for rec.HistNext-rec.HistFirst > uint64(s.HistoryRetention) {
		if err := b.Delete(histKey(key, rec.HistFirst)); err != nil {
			return err
		}
		rec.HistFirst++
	}
	return nil
}

// Get implements fencedstore.Store.
func (s *Store) Get(ctx context.Context, key string) (fencedstore.Object, error) {
	if err := fencedstore.ValidateKey(key); err != nil {
		return fencedstore.Object{}, err
	}
	var obj fencedstore.Object
	err := s.db.View(func(tx *bbolt.Tx) error {
		rec, err := loadRecord(tx, []byte(key))
		if err != nil {
			return err
		}
		if rec.Version == 0 || !rec.Deleted.IsZero() {
			return fmt.Errorf("get %s: %w", key, fencedstore.ErrNotFound)
		}
		obj.Meta = rec.Meta
		obj.Body = bytes.Clone(tx.Bucket(bucketBody).Get([]byte(key)))
		return nil
	})
	return obj, err
}

// List implements fencedstore.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]fencedstore.Meta, error) {
	if err := fencedstore.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var out []fencedstore.Meta
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketMeta).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			var rec record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			out = append(out, rec.Meta)
		}
		return nil
	})
	return out, err
}

// History implements fencedstore.Store.
func (s *Store) History(ctx context.Context, key string) ([]fencedstore.Decision, error) {
	if err := fencedstore.ValidateKey(key); err != nil {
		return nil, err
	}
	var out []fencedstore.Decision
	err := s.db.View(func(tx *bbolt.Tx) error {
		rec, err := loadRecord(tx, []byte(key))
		if err != nil {
			return err
		}
		if rec.HistNext == 0 {
			return fmt.Errorf("history %s: %w", key, fencedstore.ErrNotFound)
		}
		b := tx.Bucket(bucketHist)
		for i := rec.HistFirst; i < rec.HistNext; i++ {
			var d fencedstore.Decision
			if err := json.Unmarshal(b.Get(histKey([]byte(key), i)), &d); err != nil {
				return fmt.Errorf("decode history %s/%d: %w", key, i, err)
			}
			out = append(out, d)
		}
		return nil
	})
	return out, err
}

// loadRecord returns key's live record, else its tombstone, else a zero
// record.
func loadRecord(tx *bbolt.Tx, key []byte) (record, error) {
	var rec record
	v := tx.Bucket(bucketMeta).Get(key)
	if v == nil {
		v = tx.Bucket(bucketTomb).Get(key)
	}
	if v == nil {
		return rec, nil
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, fmt.Errorf("decode %s: %w", key, err)
	}
	return rec, nil
}

func putJSON(b *bbolt.Bucket, k []byte, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(k, buf)
}

// histKey is key, NUL, and the entry number big-endian, so one key's
// entries sort together and in order. Valid keys never contain NUL.
func histKey(key []byte, n uint64) []byte {
	k := make([]byte, 0, len(key)+9)
	k = append(k, key...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, n)
}

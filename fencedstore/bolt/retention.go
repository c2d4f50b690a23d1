package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencecron/fencecron/fencedstore"
)

var (
	_ fencedstore.Sweeper   = (*Store)(nil)
	_ fencedstore.Versioned = (*Store)(nil)
	_ fencedstore.Pager     = (*Store)(nil)
)

// timeKey is a time index entry: the time as big-endian nanoseconds since
// 1970 (times before it count as 0), NUL, the key. Entries sort by time,
// then key.
func timeKey(t time.Time, key []byte) []byte {
	n := t.UnixNano()
	if t.IsZero() || n < 0 {
		n = 0
	}
	k := binary.BigEndian.AppendUint64(make([]byte, 0, len(key)+9), uint64(n))
	k = append(k, 0)
	return append(k, key...)
}

// keyOfTimeKey returns the key of a time index entry.
func keyOfTimeKey(k []byte) []byte { return k[9:] }

// timeOfTimeKey returns the time of a time index entry.
func timeOfTimeKey(k []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))).UTC()
}

// touchedOf is the time a live record is indexed by: its last accepted
// change, or, for a record from before retention, its body's time.
func touchedOf(rec record) time.Time {
	if !rec.Touched.IsZero() {
		return rec.Touched
	}
	return rec.Updated
}

// indexTouched builds the touched index of a file from before retention.
func indexTouched(tx *bbolt.Tx) error {
	idx := tx.Bucket(bucketTouch)
	return tx.Bucket(bucketMeta).ForEach(func(k, v []byte) error {
		var rec record
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("decode %s: %w", k, err)
		}
		return idx.Put(timeKey(touchedOf(rec), k), nil)
	})
}

// floorOf returns the greatest floor that applies to key and the prefix
// it belongs to. The floors bucket holds one entry per rule prefix that
// ever dropped a tombstone: a handful.
func floorOf(tx *bbolt.Tx, key string) (fencedstore.Token, string, error) {
	var best fencedstore.Token
	var prefix string
	err := tx.Bucket(bucketFloors).ForEach(func(k, v []byte) error {
		if !strings.HasPrefix(key, string(k)) {
			return nil
		}
		var t fencedstore.Token
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("decode floor %s: %w", k, err)
		}
		if best.Less(t) {
			best, prefix = t, string(k)
		}
		return nil
	})
	return best, prefix, err
}

// versionKey is key NUL version, big-endian.
func versionKey(key []byte, v uint64) []byte { return histKey(key, v) }

// keepVersion stores the body key had at m.Version before a newer one
// replaces it, and drops what store.keep_versions no longer keeps. The
// value is the state's JSON length (uvarint), the JSON, then the body.
func (s *Store) keepVersion(tx *bbolt.Tx, key []byte, m fencedstore.Meta) error {
	b := tx.Bucket(bucketVers)
	if s.KeepVersions > 1 {
		meta, err := json.Marshal(m)
		if err != nil {
			return err
		}
		body := tx.Bucket(bucketBody).Get(key)
		v := binary.AppendUvarint(make([]byte, 0, len(meta)+len(body)+4), uint64(len(meta)))
		v = append(append(v, meta...), body...)
		if err := b.Put(versionKey(key, m.Version), v); err != nil {
			return err
		}
	}
	// The new body is version m.Version+1; keep KeepVersions-1 before it.
	return deleteVersions(b, key, m.Version+2-min(m.Version+2, uint64(s.KeepVersions)))
}

// deleteVersions deletes key's kept versions below limit (every one for
// limit math.MaxUint64).
func deleteVersions(b *bbolt.Bucket, key []byte, limit uint64) error {
	p := append(bytes.Clone(key), 0)
	c := b.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p) && len(k) == len(p)+8; k, _ = c.Seek(p) {
		if binary.BigEndian.Uint64(k[len(p):]) >= limit {
			return nil
		}
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// keptVersions lists key's kept earlier versions.
func keptVersions(b *bbolt.Bucket, key []byte) []uint64 {
	var out []uint64
	p := append(bytes.Clone(key), 0)
	c := b.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if len(k) == len(p)+8 {
			out = append(out, binary.BigEndian.Uint64(k[len(p):]))
		}
	}
	return out
}

// GetVersion implements fencedstore.Versioned.
func (s *Store) GetVersion(ctx context.Context, key string, v uint64) (fencedstore.Object, error) {
	if err := fencedstore.ValidateKey(key); err != nil {
		return fencedstore.Object{}, err
	}
	var obj fencedstore.Object
	err := s.db.View(func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketMeta).Get([]byte(key))
		if raw == nil {
			return fmt.Errorf("get %s: %w", key, fencedstore.ErrNotFound)
		}
		var rec record
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("decode %s: %w", key, err)
		}
		if rec.Version == 0 {
			return fmt.Errorf("get %s: %w", key, fencedstore.ErrNotFound)
		}
		if v == rec.Version {
			obj.Meta = rec.Meta
			obj.Body = bytes.Clone(tx.Bucket(bucketBody).Get([]byte(key)))
			return nil
		}
		b := tx.Bucket(bucketVers)
		val := b.Get(versionKey([]byte(key), v))
		if val == nil {
			return &fencedstore.VersionError{Key: key, Version: v, Kept: append(keptVersions(b, []byte(key)), rec.Version), KeepLimit: s.KeepVersions}
		}
		n, w := binary.Uvarint(val)
		if w <= 0 || uint64(len(val)-w) < n {
			return fmt.Errorf("decode %s version %d: bad length", key, v)
		}
		if err := json.Unmarshal(val[w:w+int(n)], &obj.Meta); err != nil {
			return fmt.Errorf("decode %s version %d: %w", key, v, err)
		}
		obj.Body = bytes.Clone(val[w+int(n):])
		return nil
	})
	return obj, err
}

// ListPage implements fencedstore.Pager.
func (s *Store) ListPage(ctx context.Context, prefix, after string, limit int) (fencedstore.Page, error) {
	if err := fencedstore.ValidatePrefix(prefix); err != nil {
		return fencedstore.Page{}, err
	}
	var page fencedstore.Page
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketMeta).Cursor()
		p := []byte(prefix)
		k, v := c.Seek(p)
		if after != "" && after >= prefix {
			k, v = c.Seek([]byte(after))
			if k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			if len(page.Keys) == limit {
				page.Next = page.Keys[limit-1].Key
				return nil
			}
			var rec record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			page.Keys = append(page.Keys, rec.Meta)
		}
		return nil
	})
	return page, err
}

// sweepScanFactor bounds the index entries one sweep step may look at to
// sweepScanFactor times its batch: entries of keys outside the rule's
// prefix are skipped, and a step that runs out says More.
const sweepScanFactor = 20

// SweepRule implements fencedstore.Sweeper, in one transaction.
//
// It walks the touched index (every live key, least recently changed
// first) and dooms the keys under the prefix that are older than the
// cut-off, then, while more than MaxKeys remain, the next oldest: one
// pass serves both. The index is not per prefix, so a step may have to
// skip other keys; it looks at a bounded number of entries, and the
// next step goes on from where it stopped (the store remembers the place
// per prefix until a step finds nothing more to do), so every step makes
// progress and a whole sweep reads the index once.
func (s *Store) SweepRule(ctx context.Context, rule fencedstore.RetentionRule, now time.Time, limit int) (fencedstore.Sweep, error) {
	if err := rule.Validate(); err != nil {
		return fencedstore.Sweep{}, err
	}
	now = now.UTC()
	cutoff := now.Add(-rule.MaxAge)
	var sw fencedstore.Sweep
	var resume []byte
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	err := s.db.Update(func(tx *bbolt.Tx) error {
		sw, resume = fencedstore.Sweep{}, nil
		p := []byte(rule.Prefix)
		excess := -1 // keys beyond MaxKeys; -1: no count rule
		if rule.MaxKeys > 0 {
			live := 0
			c := tx.Bucket(bucketMeta).Cursor()
			for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
				live++
			}
			excess = live - rule.MaxKeys
		}
		var doomed [][]byte
		c := tx.Bucket(bucketTouch).Cursor()
		k, _ := c.First()
		if at := s.sweepAt[rule.Prefix]; at != nil {
			k, _ = c.Seek(at)
		}
		for budget := sweepScanFactor * limit; k != nil; k, _ = c.Next() {
			if len(doomed) == limit || budget == 0 {
				sw.More = true
				break
			}
			budget--
			key := keyOfTimeKey(k)
			if !bytes.HasPrefix(key, p) {
				resume = k
				continue
			}
			old := rule.MaxAge > 0 && timeOfTimeKey(k).Before(cutoff)
			if !old && excess <= 0 {
				break // the rest is younger and within the count
			}
			doomed = append(doomed, bytes.Clone(key))
			excess--
			if old {
				sw.ByAge = append(sw.ByAge, string(key))
			} else {
				sw.ByCount = append(sw.ByCount, string(key))
			}
			resume = k
		}
		resume = bytes.Clone(resume)
		for _, k := range doomed {
			if err := s.bury(tx, k, rule.Prefix, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fencedstore.Sweep{}, fmt.Errorf("sweep %s: %w", rule.Prefix, err)
	}
	if s.sweepAt == nil {
		s.sweepAt = map[string][]byte{}
	}
	if sw.More {
		s.sweepAt[rule.Prefix] = resume
	} else {
		delete(s.sweepAt, rule.Prefix)
	}
	return sw, nil
}

// bury deletes a live key (body, kept versions, history, index entry) and
// leaves its tombstone, whose history opens with the deletion.
func (s *Store) bury(tx *bbolt.Tx, key []byte, prefix string, now time.Time) error {
	raw := tx.Bucket(bucketMeta).Get(key)
	if raw == nil {
		return nil
	}
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("decode %s: %w", key, err)
	}
	for _, del := range []struct {
		b *bbolt.Bucket
		k []byte
	}{
		{tx.Bucket(bucketMeta), key},
		{tx.Bucket(bucketBody), key},
		{tx.Bucket(bucketTouch), timeKey(touchedOf(rec), key)},
	} {
		if err := del.b.Delete(del.k); err != nil {
			return err
		}
	}
	if err := deleteVersions(tx.Bucket(bucketVers), key, ^uint64(0)); err != nil {
		return err
	}
	if err := deleteHistory(tx.Bucket(bucketHist), key, rec.HistFirst, rec.HistNext); err != nil {
		return err
	}
	tomb := record{HistFirst: rec.HistNext, HistNext: rec.HistNext, DeletedBy: prefix}
	var d fencedstore.Decision
	tomb.Meta, d = fencedstore.DecideDelete(rec.Meta, now)
	if err := s.appendHistory(tx, key, &tomb, d); err != nil {
		return err
	}
	if err := tx.Bucket(bucketTombAt).Put(timeKey(now, key), nil); err != nil {
		return err
	}
	return putJSON(tx.Bucket(bucketTomb), key, tomb)
}

func deleteHistory(b *bbolt.Bucket, key []byte, first, next uint64) error {
	for i := first; i < next; i++ {
		if err := b.Delete(histKey(key, i)); err != nil {
			return err
		}
	}
	return nil
}

// DropTombstones implements fencedstore.Sweeper, in one transaction.
func (s *Store) DropTombstones(ctx context.Context, cutoff time.Time, limit int) (int, bool, error) {
	n, more := 0, false
	err := s.db.Update(func(tx *bbolt.Tx) error {
		n, more = 0, false
		floors := map[string]fencedstore.Token{}
		c := tx.Bucket(bucketTombAt).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.First() {
			if !timeOfTimeKey(k).Before(cutoff) {
				break
			}
			if n == limit {
				more = true
				break
			}
			key := bytes.Clone(keyOfTimeKey(k))
			if err := c.Delete(); err != nil {
				return err
			}
			rec, err := loadRecord(tx, key)
			if err != nil {
				return err
			}
			if rec.Deleted.IsZero() {
				continue // brought back meanwhile; its index entry was stale
			}
			if f := floors[rec.DeletedBy]; rec.DeletedBy != "" && f.Less(rec.Greatest) {
				floors[rec.DeletedBy] = rec.Greatest
			}
			if err := deleteHistory(tx.Bucket(bucketHist), key, rec.HistFirst, rec.HistNext); err != nil {
				return err
			}
			if err := tx.Bucket(bucketTomb).Delete(key); err != nil {
				return err
			}
			n++
		}
		fb := tx.Bucket(bucketFloors)
		for prefix, t := range floors {
			var old fencedstore.Token
			if v := fb.Get([]byte(prefix)); v != nil {
				if err := json.Unmarshal(v, &old); err != nil {
					return fmt.Errorf("decode floor %s: %w", prefix, err)
				}
			}
			if old.Less(t) {
				if err := putJSON(fb, []byte(prefix), t); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("drop tombstones: %w", err)
	}
	return n, more, nil
}

package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.etcd.io/bbolt"

	"github.com/fencecron/fencecron/fencedstore"
)

// A call with a quota (fencedstore.Quota) is counted and written under
// the lock of its quota's first path segment, held from the count to
// the decision, so no other quota-checked call of an overlapping scope
// counts in between. The count reads the file in its own transaction,
// outside the committer, so that counting a full scope never holds up
// every other write. One process owns the file, so a lock in it is
// enough for the quota to hold exactly.

// scopeLocks are the locks of quota segments. An entry lives only while a
// call holds or waits for it, so memory stays bounded by the calls in
// flight. The lock is a channel, so a waiter gives up when its context
// ends.
type scopeLocks struct {
	mu sync.Mutex
	m  map[string]*scopeLock
}

type scopeLock struct {
	ch   chan struct{} // holds one token while locked
	refs int           // holders and waiters
}

// lock takes the lock of prefix's first segment and returns its release,
// or ctx's error if ctx ends first.
func (l *scopeLocks) lock(ctx context.Context, prefix string) (func(), error) {
	seg := fencedstore.QuotaSegment(prefix)
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*scopeLock{}
	}
	e := l.m[seg]
	if e == nil {
		e = &scopeLock{ch: make(chan struct{}, 1)}
		l.m[seg] = e
	}
	e.refs++
	l.mu.Unlock()
	drop := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, seg)
		}
		l.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
}

// entries is how many scope locks exist, for tests.
func (l *scopeLocks) entries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// withinQuota takes q's lock and checks a call on key against it; the
// caller decides the call, then calls unlock. Without a quota it does
// nothing.
func (s *Store) withinQuota(ctx context.Context, q *fencedstore.Quota, key string, publish bool, body int64) (unlock func(), err error) {
	if q == nil {
		return func() {}, nil
	}
	unlock, err = s.scopes.lock(ctx, q.Prefix)
	if err != nil {
		return nil, err
	}
	u, err := s.usage(q.Prefix, key)
	if err == nil {
		err = fencedstore.CheckQuota(*q, u, publish, body)
	}
	if err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// usage counts the live keys under prefix.
func (s *Store) usage(prefix, key string) (fencedstore.Usage, error) {
	u := fencedstore.Usage{KeySize: -1}
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketMeta).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			var rec record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			u.Keys++
			u.Bytes += rec.Size
			if string(k) == key {
				u.KeySize = rec.Size
			}
		}
		return nil
	})
	return u, err
}

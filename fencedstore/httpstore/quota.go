package httpstore

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/fencecron/fencecron/fencedstore"
)

// scopeLocks serializes the quota-checked writes that share the first path
// segment of their token's scope ("reports/" for "reports/" and
// "reports/monthly/"), so that the usage a write checks cannot change
// under it by another quota-checked write on this node: two overlapping
// scopes always share their first segment. An entry lives only while a
// write holds or waits for it, so memory stays bounded by the writes in
// flight. The lock is a channel, so a waiter gives up when its request
// ends.
type scopeLocks struct {
	mu sync.Mutex
	m  map[string]*scopeLock
}

type scopeLock struct {
	ch   chan struct{} // holds one token while locked
	refs int           // holders and waiters
}

// lock takes the lock of scope prefix's first segment and returns its
// release, or ctx's error if ctx ends first.
func (l *scopeLocks) lock(ctx context.Context, prefix string) (func(), error) {
	seg := prefix
	if i := strings.IndexByte(prefix, '/'); i >= 0 {
		seg = prefix[:i+1]
	}
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

// checkQuota refuses a write to key under a token of scope s that would
// take the keys under s.Prefix beyond the handler's quotas: more keys than
// QuotaKeys, or more body bytes than QuotaBytes, counting the write as
// applied (body is the publish's size; an establish adds no bytes, but a
// new key all the same, since every decision keeps the key's history).
// The caller holds the scope's lock. Usage is counted with Store.List.
func (h *Handler) checkQuota(ctx context.Context, s fencedstore.Scope, key string, publish bool, body int64) error {
	metas, err := h.Store.List(ctx, s.Prefix)
	if err != nil {
		return err
	}
	// Usage now, and after this write.
	keys, bytes := int64(len(metas)), int64(0)
	var replaced int64 = -1 // the size of key's body, if key exists
	for _, m := range metas {
		bytes += m.Size
		if m.Key == key {
			replaced = m.Size
		}
	}
	keysAfter, bytesAfter := keys, bytes
	if replaced < 0 {
		keysAfter++
	}
	if publish {
		bytesAfter += body - max(replaced, 0)
	}
	maxKeys, maxBytes := h.quotaKeys(), h.quotaBytes()
	switch {
	case keysAfter > maxKeys:
		return fmt.Errorf("%w: scope %q of job %s holds %d keys; the limit is %d (store.quota.keys)", fencedstore.ErrQuota, s.Prefix, s.Job, keys, maxKeys)
	case bytesAfter > maxBytes:
		return fmt.Errorf("%w: scope %q of job %s holds %d bytes, %d with this body; the limit is %d (store.quota.bytes)", fencedstore.ErrQuota, s.Prefix, s.Job, bytes, bytesAfter, maxBytes)
	}
	return nil
}

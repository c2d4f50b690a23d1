package fencemodel

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// MemStore is a fenced store in memory that decides every call with the
// rules of fencedstore under one mutex. Checker tests use it as the honest
// store, and plant bugs in it through DecidePublish.
type MemStore struct {
	// DecidePublish decides a publish; nil means fencedstore.DecidePublish.
	// A test swaps in a broken rule to see the checkers catch it.
	DecidePublish func(m fencedstore.Meta, floor fencedstore.Token, req fencedstore.PublishRequest, hash string, now time.Time) (fencedstore.Meta, fencedstore.Decision)
	// Now is the clock decisions are made and stamped with; nil means
	// time.Now.
	Now func() time.Time
	// ForgetOnDelete is a planted bug: Delete drops the key entirely,
	// tombstone and all, so a stale token can bring it back.
	ForgetOnDelete bool

	mu     sync.Mutex
	keys   map[string]*memKey
	floors map[string]fencedstore.Token // by job
}

type memKey struct {
	meta fencedstore.Meta
	body []byte
	hist []fencedstore.Decision
}

var _ fencedstore.Store = (*MemStore)(nil)

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{keys: map[string]*memKey{}} }

func (s *MemStore) key(k string) *memKey {
	if s.keys[k] == nil {
		s.keys[k] = &memKey{meta: fencedstore.Meta{Key: k}}
	}
	return s.keys[k]
}

func (s *MemStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Establish implements fencedstore.Store.
func (s *MemStore) Establish(ctx context.Context, req fencedstore.EstablishRequest) (fencedstore.Result, error) {
	if err := fencedstore.ValidateCall(req.Key, req.Token, req.Expires); err != nil {
		return fencedstore.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.withinQuota(req.Quota, req.Key, false, 0); err != nil {
		return fencedstore.Result{}, err
	}
	k := s.key(req.Key)
	var d fencedstore.Decision
	k.meta, d = fencedstore.DecideEstablish(k.meta, s.floors[req.Job], req, s.now())
	k.hist = append(k.hist, d)
	return fencedstore.Result{Outcome: d.Outcome, Key: req.Key, Version: k.meta.Version, Greatest: k.meta.Greatest, Floor: d.Floor}, d.Err()
}

// Publish implements fencedstore.Store.
func (s *MemStore) Publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	if err := fencedstore.ValidateCall(req.Key, req.Token, req.Expires); err != nil {
		return fencedstore.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.withinQuota(req.Quota, req.Key, true, int64(len(req.Body))); err != nil {
		return fencedstore.Result{}, err
	}
	decide := s.DecidePublish
	if decide == nil {
		decide = fencedstore.DecidePublish
	}
	k := s.key(req.Key)
	next, d := decide(k.meta, s.floors[req.Job], req, fencedstore.Hash(req.Body), s.now())
	if next.Version != k.meta.Version {
		k.body = bytes.Clone(req.Body)
	}
	k.meta = next
	k.hist = append(k.hist, d)
	return fencedstore.Result{Outcome: d.Outcome, Key: req.Key, Version: k.meta.Version, Greatest: k.meta.Greatest, Floor: d.Floor}, d.Err()
}

// RaiseFloor implements fencedstore.Store.
func (s *MemStore) RaiseFloor(ctx context.Context, job string, tok fencedstore.Token) (fencedstore.Token, error) {
	if err := fencedstore.ValidateFloor(job, tok); err != nil {
		return fencedstore.Token{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.floors == nil {
		s.floors = map[string]fencedstore.Token{}
	}
	s.floors[job] = fencedstore.RaiseTo(s.floors[job], tok)
	return s.floors[job], nil
}

// withinQuota checks a call against q, under s.mu.
func (s *MemStore) withinQuota(q *fencedstore.Quota, key string, publish bool, body int64) error {
	if q == nil {
		return nil
	}
	u := fencedstore.Usage{KeySize: -1}
	for name, k := range s.keys {
		if strings.HasPrefix(name, q.Prefix) && k.meta.Deleted.IsZero() {
			u.Keys++
			u.Bytes += k.meta.Size
			if name == key {
				u.KeySize = k.meta.Size
			}
		}
	}
	return fencedstore.CheckQuota(*q, u, publish, body)
}

// Get implements fencedstore.Store.
func (s *MemStore) Get(ctx context.Context, key string) (fencedstore.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	if k == nil || k.meta.Version == 0 || !k.meta.Deleted.IsZero() {
		return fencedstore.Object{}, fencedstore.ErrNotFound
	}
	return fencedstore.Object{Meta: k.meta, Body: bytes.Clone(k.body)}, nil
}

// List implements fencedstore.Store.
func (s *MemStore) List(ctx context.Context, prefix string) ([]fencedstore.Meta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []fencedstore.Meta
	for name, k := range s.keys {
		if strings.HasPrefix(name, prefix) && k.meta.Deleted.IsZero() {
			out = append(out, k.meta)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// History implements fencedstore.Store.
func (s *MemStore) History(ctx context.Context, key string) ([]fencedstore.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	if k == nil {
		return nil, fencedstore.ErrNotFound
	}
	return append([]fencedstore.Decision(nil), k.hist...), nil
}

// Delete deletes key as retention does: it becomes a tombstone holding its
// greatest token, and its history starts again from the deletion. A
// missing key is left alone.
func (s *MemStore) Delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	if k == nil || !k.meta.Deleted.IsZero() {
		return
	}
	m, d := fencedstore.DecideDelete(k.meta, s.now())
	if s.ForgetOnDelete {
		delete(s.keys, key)
		return
	}
	*k = memKey{meta: m, hist: []fencedstore.Decision{d}}
}

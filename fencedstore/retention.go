package fencedstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Retention: how the store forgets, without ever letting a stale token
// write again.
//
// A rule (store.retention) names a key prefix and how long (MaxAge) or how
// many (MaxKeys) of the keys under it are kept. A key's age is the time of
// its last accepted write or establish. The store deletes what a rule says
// must go in bounded batches, each one atomic step, and records nothing in
// the remaining keys.
//
// Deleting a key must not undo its fencing: an attempt that was refused
// yesterday, or one that was never seen, could come back with an old token
// and find a fresh, empty key. So a deleted key leaves a tombstone that
// keeps its greatest token, and every call on it must carry a token newer
// than that one (an equal one is refused too: its holder already wrote the
// key that was deleted). A newer token recreates the key from version 0.
//
// A tombstone cannot stay forever, or retention would keep one record per
// deleted key and gain nothing. It may go once no token it shuts out could
// still be accepted. The tokens it shuts out are the ones not newer than
// its own, and those were all granted before it, so before the deletion.
// Every token a node hands out carries an expiry that the store enforces
// (the signed tokens always do: grant + timeout + lease TTL + 2 minutes,
// jobs.TokenExpiry), so once TombstoneTTL, the longest validity any token
// is given, has passed since the deletion, every one of them has expired.
//
// That bound is a setting the store cannot check against tokens it never
// saw (a call without an expiry, a job whose timeout is longer than the
// bound), so the store does not rely on it alone: when it drops a
// tombstone it raises the floor of the rule's prefix to the tombstone's
// token, and a key under that prefix with no record at all is treated as
// a tombstone holding the floor. A token up to the floor is then refused
// on every key under the prefix. That is safe (it can only refuse, never
// resurrect) and, while TombstoneTTL is long enough, refuses nothing
// legitimate: such a token was granted more than TombstoneTTL ago. The
// floors are one token per rule prefix ever used, and they are never
// dropped.

// RetentionRule is one entry of store.retention.
type RetentionRule struct {
	// Prefix selects the keys the rule applies to; it is required (no
	// rule covers the whole store by accident), and it should end in "/".
	Prefix string
	// MaxAge, if set, deletes keys whose last accepted write or establish
	// is older than it.
	MaxAge time.Duration
	// MaxKeys, if set, keeps only the MaxKeys most recently changed keys
	// under Prefix.
	MaxKeys int
}

// String describes the rule for logs.
func (r RetentionRule) String() string {
	var parts []string
	if r.MaxAge > 0 {
		parts = append(parts, "max_age "+r.MaxAge.String())
	}
	if r.MaxKeys > 0 {
		parts = append(parts, fmt.Sprintf("max_keys %d", r.MaxKeys))
	}
	return r.Prefix + " (" + strings.Join(parts, ", ") + ")"
}

// Validate checks a rule.
func (r RetentionRule) Validate() error {
	switch {
	case r.Prefix == "":
		return errors.New("prefix is required: a rule never applies to the whole store")
	case ValidatePrefix(r.Prefix) != nil:
		return fmt.Errorf("prefix %q: %v", r.Prefix, ValidatePrefix(r.Prefix))
	case r.MaxAge < 0 || r.MaxKeys < 0:
		return errors.New("max_age and max_keys must not be negative")
	case r.MaxAge == 0 && r.MaxKeys == 0:
		return errors.New("set max_age, max_keys or both")
	}
	return nil
}

// Retention defaults.
const (
	// DefaultTombstoneTTL is how long a deleted key's tombstone is kept:
	// longer than any token a job left at sane settings is good for
	// (timeout + lease TTL + jobs.TokenExpiryMargin).
	DefaultTombstoneTTL = 7 * 24 * time.Hour
	// DefaultSweepBatch is how many keys one atomic sweep step deletes.
	DefaultSweepBatch = 500
	// DefaultSweepInterval is how often the store sweeps.
	DefaultSweepInterval = time.Minute
	// DefaultKeepVersions is how many bodies of a key the store keeps,
	// the current one included (store.keep_versions).
	DefaultKeepVersions = 3
	// MaxKeepVersions bounds store.keep_versions.
	MaxKeepVersions = 1000
)

// Sweep is what one atomic sweep step did.
type Sweep struct {
	// Deleted are the keys made tombstones, by age then by count.
	ByAge, ByCount []string
	// More reports that the rule may have more to delete now.
	More bool
}

// Sweeper is a store that retention can trim. Both methods are one
// atomic step each, safe for concurrent use with every other call.
type Sweeper interface {
	// SweepRule deletes at most limit keys under rule.Prefix that the
	// rule says must go at now: first the keys last changed before
	// now - MaxAge, then the least recently changed ones beyond MaxKeys.
	// Each becomes a tombstone (see DecideDelete).
	SweepRule(ctx context.Context, rule RetentionRule, now time.Time, limit int) (Sweep, error)
	// DropTombstones removes at most limit tombstones made before cutoff,
	// raising the floor of the prefix that deleted each to its token, and
	// reports how many it removed and whether more may be due.
	DropTombstones(ctx context.Context, cutoff time.Time, limit int) (n int, more bool, err error)
}

// Versioned is a store that keeps earlier bodies of its keys.
type Versioned interface {
	// GetVersion returns the body and state a key had at version v, or
	// ErrNotFound (wrapped in a VersionError when the key exists but
	// that version is not kept).
	GetVersion(ctx context.Context, key string, v uint64) (Object, error)
}

// VersionError says which versions of a key are kept, for a version that
// is not.
type VersionError struct {
	Key       string
	Version   uint64
	Kept      []uint64 // oldest first
	KeepLimit int
}

func (e *VersionError) Error() string {
	kept := make([]string, len(e.Kept))
	for i, v := range e.Kept {
		kept[i] = fmt.Sprint(v)
	}
	return fmt.Sprintf("%s version %d is not kept: %v; the store keeps the last %d bodies of a key (store.keep_versions), here versions %s",
		e.Key, e.Version, ErrNotFound, e.KeepLimit, strings.Join(kept, ", "))
}

func (e *VersionError) Unwrap() error { return ErrNotFound }

// GetVersion returns version v of key from s: through Versioned if s keeps
// versions, else the current body if it is version v.
func GetVersion(ctx context.Context, s Store, key string, v uint64) (Object, error) {
	if vs, ok := s.(Versioned); ok {
		return vs.GetVersion(ctx, key, v)
	}
	obj, err := s.Get(ctx, key)
	if err != nil {
		return obj, err
	}
	if obj.Version != v {
		return Object{}, &VersionError{Key: key, Version: v, Kept: []uint64{obj.Version}, KeepLimit: 1}
	}
	return obj, nil
}

// Page is one page of a listing.
type Page struct {
	Keys []Meta
	// Next is the cursor of the next page; empty on the last.
	Next string
}

// Pager is a store that lists one bounded page at a time.
type Pager interface {
	// ListPage returns at most limit keys with the prefix, in key order,
	// starting after the key the cursor after names ("" from the start).
	ListPage(ctx context.Context, prefix, after string, limit int) (Page, error)
}

// ListPage lists one page of s: through Pager if s has it, else by
// cutting the whole listing (small stores and test doubles).
func ListPage(ctx context.Context, s Store, prefix, after string, limit int) (Page, error) {
	if p, ok := s.(Pager); ok {
		return p.ListPage(ctx, prefix, after, limit)
	}
	all, err := s.List(ctx, prefix)
	if err != nil {
		return Page{}, err
	}
	i := 0
	for i < len(all) && after != "" && all[i].Key <= after {
		i++
	}
	all = all[i:]
	if len(all) > limit {
		return Page{Keys: all[:limit], Next: all[limit-1].Key}, nil
	}
	return Page{Keys: all}, nil
}

// FloorOf returns the greatest floor that applies to key among floors
// (prefix to token), or the zero token.
func FloorOf(floors map[string]Token, key string) Token {
	var f Token
	for p, t := range floors {
		if strings.HasPrefix(key, p) && f.Less(t) {
			f = t
		}
	}
	return f
}

// Retainer runs retention on a store: every Interval it sweeps each rule
// in batches of Batch keys until the rule has nothing more to delete (at
// most MaxBatches batches per rule and round, so one round is bounded),
// then drops the tombstones older than TombstoneTTL. Set the fields, then
// Start; Close stops it.
type Retainer struct {
	Store        Sweeper
	Rules        []RetentionRule
	TombstoneTTL time.Duration
	Batch        int
	MaxBatches   int
	Interval     time.Duration
	// Now is the clock ages are judged by; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// OnDelete, if set, is called after each batch with the rule and the
	// number of keys deleted by age and by count (metrics).
	OnDelete func(rule RetentionRule, byAge, byCount int)
	// OnDrop, if set, is called with the number of tombstones dropped.
	OnDrop func(n int)

	cancel context.CancelFunc
	done   chan struct{}
	wake   chan chan error
	once   sync.Once
}

// Start validates the rules and starts the loop; it sweeps at once.
func (r *Retainer) Start() error {
	for i, rule := range r.Rules {
		if err := rule.Validate(); err != nil {
			return fmt.Errorf("store.retention[%d]: %w", i, err)
		}
	}
	if r.Batch <= 0 {
		r.Batch = DefaultSweepBatch
	}
	if r.MaxBatches <= 0 {
		r.MaxBatches = 100
	}
	if r.Interval <= 0 {
		r.Interval = DefaultSweepInterval
	}
	if r.TombstoneTTL <= 0 {
		r.TombstoneTTL = DefaultTombstoneTTL
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done, r.wake = cancel, make(chan struct{}), make(chan chan error)
	go r.loop(ctx)
	return nil
}

// Close stops the loop and waits for it.
func (r *Retainer) Close() {
	if r.cancel == nil {
		return
	}
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
}

// SweepNow runs one round at once and returns its first error.
func (r *Retainer) SweepNow(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case r.wake <- reply:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrClosed
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Retainer) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	r.Round(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Round(ctx)
		case reply := <-r.wake:
			reply <- r.Round(ctx)
		}
	}
}

func (r *Retainer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Round sweeps every rule and drops expired tombstones once, in bounded
// batches, and returns the first error (it goes on with the other rules).
// Start sets the defaults Round relies on; tests may call it directly
// after setting Batch and MaxBatches.
func (r *Retainer) Round(ctx context.Context) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	for _, rule := range r.Rules {
		start, age, count := time.Now(), 0, 0
		for i := 0; i < r.MaxBatches && ctx.Err() == nil; i++ {
			sw, err := r.Store.SweepRule(ctx, rule, r.now(), r.Batch)
			if err != nil {
				log.Error("store retention: sweep failed; the rest waits for the next round", "rule", rule.String(), "err", err)
				keep(err)
				break
			}
			age, count = age+len(sw.ByAge), count+len(sw.ByCount)
			if r.OnDelete != nil && len(sw.ByAge)+len(sw.ByCount) > 0 {
				r.OnDelete(rule, len(sw.ByAge), len(sw.ByCount))
			}
			if !sw.More {
				break
			}
		}
		if age+count > 0 {
			log.Info("store retention: deleted keys", "rule", rule.String(), "by_age", age, "by_count", count, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	dropped := 0
	for i := 0; i < r.MaxBatches && ctx.Err() == nil; i++ {
		n, more, err := r.Store.DropTombstones(ctx, r.now().Add(-r.TombstoneTTL), r.Batch)
		dropped += n
		if err != nil {
			log.Error("store retention: dropping tombstones failed", "err", err)
			keep(err)
			break
		}
		if !more {
			break
		}
	}
	if dropped > 0 {
		if r.OnDrop != nil {
			r.OnDrop(dropped)
		}
		log.Info("store retention: dropped tombstones past their time", "tombstones", dropped, "tombstone_ttl", r.TombstoneTTL)
	}
	return first
}

// Listing limits: the keys one page of GET /api/v1/store and of the Store
// page holds, by default and at most.
const (
	DefaultPageKeys = 500
	MaxPageKeys     = 5000
)

// cursorVersion prefixes a listing cursor's text, so its form can change.
const cursorVersion = "k1."

// EncodeCursor returns the opaque cursor of the listing of prefix that
// continues after key. It names the prefix too, so a cursor is refused
// with another prefix rather than silently skipping keys.
func EncodeCursor(prefix, after string) string {
	return cursorVersion + b64.EncodeToString([]byte(prefix+"\x00"+after))
}

// DecodeCursor returns the key a cursor for prefix continues after; an
// empty cursor starts from the first key. Errors wrap ErrInvalidKey.
func DecodeCursor(prefix, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	raw, err := b64.DecodeString(strings.TrimPrefix(cursor, cursorVersion))
	p, after, ok := strings.Cut(string(raw), "\x00")
	switch {
	case !strings.HasPrefix(cursor, cursorVersion) || err != nil || !ok:
		return "", fmt.Errorf("%w: cursor %q is not one this store gave out", ErrInvalidKey, truncate(cursor))
	case p != prefix:
		return "", fmt.Errorf("%w: the cursor belongs to the listing of prefix %q, not %q", ErrInvalidKey, truncate(p), truncate(prefix))
	}
	return after, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fencecron/fencecron/fencedstore"
)

var (
	_ fencedstore.Sweeper   = (*Store)(nil)
	_ fencedstore.Versioned = (*Store)(nil)
	_ fencedstore.Pager     = (*Store)(nil)
)

// floorOf returns the greatest retention floor over key, and its prefix.
// fencecron_floors holds one row per rule prefix that ever dropped a
// tombstone, so the scan is of a handful of rows.
func (s *Store) floorOf(ctx context.Context, tx pgx.Tx, key string) (fencedstore.Token, string, error) {
	var e, q int64
	var prefix string
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT prefix, epoch, seq FROM %s WHERE starts_with($1, prefix)
		ORDER BY epoch DESC, seq DESC LIMIT 1`, s.floors), key).Scan(&prefix, &e, &q)
	if errors.Is(err, pgx.ErrNoRows) {
		return fencedstore.Token{}, "", nil
	}
	return fencedstore.Token{Epoch: uint64(e), Seq: uint64(q)}, prefix, err
}

// GetVersion implements fencedstore.Versioned.
func (s *Store) GetVersion(ctx context.Context, key string, v uint64) (fencedstore.Object, error) {
	cur, err := s.Get(ctx, key)
	if err != nil || cur.Version == v {
		return cur, err
	}
	row := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT key, version, greatest_epoch, greatest_seq, token_epoch, token_seq, attempt, hash, size, updated, body
		FROM %s WHERE key = $1 AND version = $2`, s.vers), key, int64(v))
	var obj fencedstore.Object
	m, err := scanMeta(row, &obj.Body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		ve := &fencedstore.VersionError{Key: key, Version: v, KeepLimit: s.KeepVersions}
		rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT version FROM %s WHERE key = $1 ORDER BY version`, s.vers), key)
		if err != nil {
			return obj, s.fail("get", key, err)
		}
		kept, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return obj, s.fail("get", key, err)
		}
		for _, k := range kept {
			ve.Kept = append(ve.Kept, uint64(k))
		}
		ve.Kept = append(ve.Kept, cur.Version)
		return obj, ve
	case err != nil:
		return obj, s.fail("get", key, err)
	}
	obj.Meta = m
	return obj, nil
}

// ListPage implements fencedstore.Pager: one range scan of the primary
// key (C collation, so a prefix is a range), at most limit+1 rows.
func (s *Store) ListPage(ctx context.Context, prefix, after string, limit int) (fencedstore.Page, error) {
	if err := fencedstore.ValidatePrefix(prefix); err != nil {
		return fencedstore.Page{}, err
	}
	if s.closed.Load() {
		return fencedstore.Page{}, fencedstore.ErrClosed
	}
	from := max(prefix, after)
	rows, err := s.pool.Query(ctx, s.listPageSQL(prefix), from, after, prefixEnd(prefix), limit+1)
	if err != nil {
		return fencedstore.Page{}, s.fail("list", prefix, err)
	}
	defer rows.Close()
	var page fencedstore.Page
	for rows.Next() {
		m, err := scanMeta(rows)
		if err != nil {
			return fencedstore.Page{}, s.fail("list", prefix, err)
		}
		page.Keys = append(page.Keys, m)
	}
	if err := rows.Err(); err != nil {
		return fencedstore.Page{}, s.fail("list", prefix, err)
	}
	if len(page.Keys) > limit {
		page.Keys = page.Keys[:limit]
		page.Next = page.Keys[limit-1].Key
	}
	return page, nil
}

// sweepLock is the first key of the advisory lock a sweep of one prefix
// holds (the second is a hash of the schema and prefix).
const sweepLock = 72834610

// SweepRule implements fencedstore.Sweeper, in one transaction: it picks
// the keys (the touched index by age, a count over the primary key's
// prefix range, then the touched index again by count), locks them, and
// turns them into tombstones with set-based statements.
func (s *Store) SweepRule(ctx context.Context, rule fencedstore.RetentionRule, now time.Time, limit int) (fencedstore.Sweep, error) {
	if err := rule.Validate(); err != nil {
		return fencedstore.Sweep{}, err
	}
	if s.closed.Load() {
		return fencedstore.Sweep{}, fencedstore.ErrClosed
	}
	now = now.UTC().Truncate(time.Microsecond)
	var sw fencedstore.Sweep
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		sw = fencedstore.Sweep{}
		// One sweep of a prefix at a time, whichever node runs it: two
		// that counted the same keys would each delete the excess.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, sweepLock, s.Schema+" "+rule.Prefix); err != nil {
			return err
		}
		pick := func(cond string, n int, args ...any) ([]string, error) {
			args = append([]any{rule.Prefix, prefixEnd(rule.Prefix), n}, args...)
			rows, err := tx.Query(ctx, s.pickSQL(cond), args...)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		}
		var err error
		if rule.MaxAge > 0 {
			if sw.ByAge, err = pick(`AND touched < $4`, limit, now.Add(-rule.MaxAge)); err != nil {
				return err
			}
			sw.More = len(sw.ByAge) == limit
		}
		if rule.MaxKeys > 0 && len(sw.ByAge) < limit {
			var live int
			err := tx.QueryRow(ctx, s.countSQL(), rule.Prefix, prefixEnd(rule.Prefix)).Scan(&live)
			if err != nil {
				return err
			}
			if excess := live - len(sw.ByAge) - rule.MaxKeys; excess > 0 {
				room := limit - len(sw.ByAge)
				if sw.ByCount, err = pick(`AND NOT key = ANY($4)`, min(excess, room), append([]string{}, sw.ByAge...)); err != nil {
					return err
				}
				sw.More = sw.More || excess > room
			}
		}
		doomed := append(append([]string{}, sw.ByAge...), sw.ByCount...)
		if len(doomed) == 0 {
			return nil
		}
		b := &pgx.Batch{}
		b.Queue(fmt.Sprintf(`DELETE FROM %s WHERE key = ANY($1)`, s.hist), doomed)
		b.Queue(fmt.Sprintf(`DELETE FROM %s WHERE key = ANY($1)`, s.vers), doomed)
		b.Queue(fmt.Sprintf(`UPDATE %s SET deleted = $2, deleted_by = $3, version = 0, token_epoch = 0, token_seq = 0,
			attempt = '', hash = '', size = 0, updated = NULL, body = NULL, hist_first = hist_next, hist_next = hist_next + 1
			WHERE key = ANY($1)`, s.keys), doomed, now, rule.Prefix)
		// The tombstone's history opens with the deletion (see
		// fencedstore.DecideDelete).
		b.Queue(fmt.Sprintf(`INSERT INTO %s (key, n, outcome, token_epoch, token_seq, attempt, version, greatest_epoch, greatest_seq, hash, at)
			SELECT key, hist_first, $2, greatest_epoch, greatest_seq, '', 0, greatest_epoch, greatest_seq, '', $3
			FROM %s WHERE key = ANY($1)`, s.hist, s.keys), doomed, string(fencedstore.Deleted), now)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fencedstore.Sweep{}, s.fail("sweep", rule.Prefix, err)
	}
	return sw, nil
}

// DropTombstones implements fencedstore.Sweeper, in one transaction, by
// the deleted index.
func (s *Store) DropTombstones(ctx context.Context, cutoff time.Time, limit int) (int, bool, error) {
	if s.closed.Load() {
		return 0, false, fencedstore.ErrClosed
	}
	n := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.dropSQL(), cutoff, limit)
		if err != nil {
			return err
		}
		var keys []string
		floors := map[string]fencedstore.Token{}
		for rows.Next() {
			var key, prefix string
			var e, q int64
			if err := rows.Scan(&key, &prefix, &e, &q); err != nil {
				rows.Close()
				return err
			}
			keys = append(keys, key)
			if t := (fencedstore.Token{Epoch: uint64(e), Seq: uint64(q)}); prefix != "" && floors[prefix].Less(t) {
				floors[prefix] = t
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		n = len(keys)
		b := &pgx.Batch{}
		b.Queue(fmt.Sprintf(`DELETE FROM %s WHERE key = ANY($1)`, s.hist), keys)
		for prefix, t := range floors {
			b.Queue(fmt.Sprintf(`INSERT INTO %[1]s (prefix, epoch, seq) VALUES ($1, $2, $3)
				ON CONFLICT (prefix) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq
				WHERE (%[1]s.epoch, %[1]s.seq) < (excluded.epoch, excluded.seq)`, s.floors), prefix, int64(t.Epoch), int64(t.Seq))
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, false, s.fail("drop tombstones", "", err)
	}
	return n, n == limit, nil
}

// The retention and listing queries. A prefix is a range of the primary
// key ([prefix, prefixEnd(prefix)), C collation), so every one of them
// reads only the keys under it; the age and tombstone queries have the
// partial indexes fencecron_keys_touched and fencecron_keys_deleted.
// TestStore_QueriesUseIndexes checks the plans.

// pickSQL selects and locks the keys a sweep deletes, least recently
// changed first: $1 prefix, $2 its end, $3 how many, $4 cond's argument.
// A key a call is writing right now is skipped, not waited for: the write
// may make it the most recently changed, and the next oldest goes instead
// (or it goes in a later sweep, if it is still due).
func (s *Store) pickSQL(cond string) string {
	return fmt.Sprintf(`SELECT key FROM %s WHERE deleted IS NULL AND key >= $1 AND key < $2 %s
		ORDER BY touched, key LIMIT $3 FOR UPDATE SKIP LOCKED`, s.keys, cond)
}

// countSQL counts the live keys under $1 (its end $2).
func (s *Store) countSQL() string {
	return fmt.Sprintf(`SELECT count(*) FROM %s WHERE deleted IS NULL AND key >= $1 AND key < $2`, s.keys)
}

// dropSQL deletes at most $2 tombstones made before $1 (skipping one a
// call is deciding on right now, which may bring it back).
func (s *Store) dropSQL() string {
	return fmt.Sprintf(`DELETE FROM %[1]s WHERE key IN (
			SELECT key FROM %[1]s WHERE deleted < $1 ORDER BY deleted LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING key, coalesce(deleted_by, ''), greatest_epoch, greatest_seq`, s.keys)
}

// listPageSQL lists live keys from $1 after $2 under a prefix ending
// before $3 (none for the empty prefix), at most $4.
func (s *Store) listPageSQL(prefix string) string {
	end := `AND key < $3`
	if prefix == "" {
		end = `AND $3 = ''`
	}
	return fmt.Sprintf(`SELECT %s FROM %s WHERE key >= $1 AND key > $2 %s AND deleted IS NULL
		ORDER BY key LIMIT $4`, metaColumns, s.keys, end)
}

// prefixEnd returns a string greater than every string with the prefix
// and than no other string at or after it, in code point order (the keys'
// C collation on UTF-8): the prefix with its last character raised by
// one (past the surrogates, which UTF-8 never holds). The empty prefix
// has none (""): use no upper bound.
func prefixEnd(p string) string {
	r := []rune(p)
	for len(r) > 0 {
		last := r[len(r)-1]
		switch {
		case last == utf8.MaxRune:
			r = r[:len(r)-1]
			continue
		case last == 0xD7FF:
			r[len(r)-1] = 0xE000
		default:
			r[len(r)-1] = last + 1
		}
		return string(r)
	}
	return ""
}

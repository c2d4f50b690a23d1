// Package postgres is the fenced store in PostgreSQL, through pgx.
//
// Each Publish or Establish is one transaction that decides and writes
// atomically: it locks the key's row (INSERT ... ON CONFLICT DO NOTHING,
// then SELECT ... FOR UPDATE), lets fencedstore.DecidePublish or
// DecideEstablish decide from what it read, and writes the decision with an
// UPDATE guarded by the values it read (version and greatest token), plus the
// history entry, then commits. The row lock is held from the read to the
// commit, so every call on one key runs as if alone (serializably, without
// the retries SERIALIZABLE isolation would cost under contention), and the
// guard makes the write conditional: if the row were not as read, nothing is
// written and the call fails. The schema is created on first use.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencecron/fencecron/fencedstore"
)

// Defaults.
const (
	DefaultSchema         = "public"
	DefaultMaxConns       = 16
	DefaultConnectTimeout = 5 * time.Second
	DefaultOpTimeout      = 30 * time.Second
)

// Store is a fencedstore.Store in a PostgreSQL database. Its tables are
// fencecron_keys and fencecron_history in Schema.
type Store struct {
	// URL is the connection string (postgres://user@host:port/db?...).
	URL string
	// Schema holds the tables; it is created if missing.
	Schema string
	// MaxBodyBytes caps a published body (default
	// fencedstore.DefaultMaxBodyBytes, 16 MiB).
	MaxBodyBytes int64
	// HistoryRetention is how many decisions each key keeps (default 1000).
	HistoryRetention int
	// KeepVersions is how many bodies each key keeps, the current one
	// included (default fencedstore.DefaultKeepVersions).
	KeepVersions int
	// MaxConns bounds the connection pool.
	MaxConns int32
	// ConnectTimeout bounds one connection attempt.
	ConnectTimeout time.Duration
	// OpTimeout bounds one call once it has started. A started Publish or
	// Establish runs to its decision even if the caller's context ends, so
	// the caller is never told "failed" about a write that was applied.
	OpTimeout time.Duration
	// Now is the clock stamped on decisions.
	Now func() time.Time

	pool   *pgxpool.Pool
	closed atomic.Bool
	where  string // host:port/db, for messages (never the password)
	keys   string // quoted table names
	hist   string
	vers   string
	floors string
	// jobFloors holds RaiseFloor's floors, one row per job.
	jobFloors string
	// schemaT is the migrations table.
	schemaT string
}

var _ fencedstore.Store = (*Store)(nil)

// New returns a store for the database at url; call Open before use.
func New(url string) *Store {
	return &Store{
		URL:              url,
		Schema:           DefaultSchema,
		MaxBodyBytes:     fencedstore.DefaultMaxBodyBytes,
		HistoryRetention: fencedstore.DefaultHistoryRetention,
		KeepVersions:     fencedstore.DefaultKeepVersions,
		MaxConns:         DefaultMaxConns,
		ConnectTimeout:   DefaultConnectTimeout,
		OpTimeout:        DefaultOpTimeout,
		Now:              time.Now,
	}
}

// Open connects, and creates the schema and tables if they are missing.
// A database that cannot be reached is ErrUnavailable.
func (s *Store) Open() error {
	if s.HistoryRetention < 1 {
		return fmt.Errorf("history retention must be at least 1, got %d", s.HistoryRetention)
	}
	if s.KeepVersions < 1 || s.KeepVersions > fencedstore.MaxKeepVersions {
		return fmt.Errorf("keep versions must be from 1 to %d, got %d", fencedstore.MaxKeepVersions, s.KeepVersions)
	}
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		// The parse error may quote the URL, password included.
		return errors.New("postgres store: the store URL is not a valid PostgreSQL connection string")
	}
	cfg.MaxConns = s.MaxConns
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > s.ConnectTimeout {
		cfg.ConnConfig.ConnectTimeout = s.ConnectTimeout
	}
	s.where = fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	s.keys = pgx.Identifier{s.Schema, "fencecron_keys"}.Sanitize()
	s.hist = pgx.Identifier{s.Schema, "fencecron_history"}.Sanitize()
	s.vers = pgx.Identifier{s.Schema, "fencecron_versions"}.Sanitize()
	s.floors = pgx.Identifier{s.Schema, "fencecron_floors"}.Sanitize()
	s.jobFloors = pgx.Identifier{s.Schema, "fencecron_job_floors"}.Sanitize()
	s.schemaT = pgx.Identifier{s.Schema, "fencecron_schema"}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), s.ConnectTimeout+s.OpTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres store at %s: %w", s.where, err)
	}
	if err := s.migrate(ctx, pool); err != nil {
		pool.Close()
		return s.fail("open", "", err)
	}
	s.pool = pool
	return nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	if s.pool != nil && !s.closed.Swap(true) {
		s.pool.Close()
	}
	return nil
}

// Establish implements fencedstore.Store.
func (s *Store) Establish(ctx context.Context, req fencedstore.EstablishRequest) (fencedstore.Result, error) {
	if err := fencedstore.ValidateCall(req.Key, req.Token, req.Expires); err != nil {
		return fencedstore.Result{}, err
	}
	return s.decide(ctx, "establish", call{key: req.Key, job: req.Job, quota: req.Quota}, func(m fencedstore.Meta, floor fencedstore.Token, now time.Time) (fencedstore.Meta, fencedstore.Decision) {
		return fencedstore.DecideEstablish(m, floor, req, now)
	})
}

// Publish implements fencedstore.Store.
func (s *Store) Publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	if err := fencedstore.ValidateCall(req.Key, req.Token, req.Expires); err != nil {
		return fencedstore.Result{}, err
	}
	if int64(len(req.Body)) > s.MaxBodyBytes {
		return fencedstore.Result{}, fmt.Errorf("publish %s: %w: %d bytes, limit %d", req.Key, fencedstore.ErrTooLarge, len(req.Body), s.MaxBodyBytes)
	}
	hash := fencedstore.Hash(req.Body)
	body := req.Body
	if body == nil {
		body = []byte{} // an empty body, not SQL NULL
	}
	return s.decide(ctx, "publish", call{key: req.Key, job: req.Job, body: body, quota: req.Quota}, func(m fencedstore.Meta, floor fencedstore.Token, now time.Time) (fencedstore.Meta, fencedstore.Decision) {
		return fencedstore.DecidePublish(m, floor, req, hash, now)
	})
}

// call is what decide needs of a Publish or Establish besides its rule.
type call struct {
	key, job string
	body     []byte // a publish's (never nil), else nil
	quota    *fencedstore.Quota
}

// rule decides a call from the key's row and its job's floor.
type rule func(m fencedstore.Meta, floor fencedstore.Token, now time.Time) (fencedstore.Meta, fencedstore.Decision)

// Advisory lock classes (the two-int form: a class, then a hash of the
// schema and the name), so that locks of different schemas in one
// database, and of different kinds, do not meet.
const (
	// lockJobFloor guards a job's floor: every call of the job holds it
	// shared while it decides and writes, RaiseFloor exclusively, so a
	// raise waits for the calls already deciding and every later call
	// reads the raised floor.
	lockJobFloor = 0x66637266 // "fcrf"
	// lockQuota serializes the calls with a quota whose prefixes share
	// their first segment (fencedstore.QuotaSegment), on every node, from
	// their count of the scope's usage to their commit: so no two count
	// the same usage and both write.
	lockQuota = 0x66637271 // "fcrq"
)

// withinQuota takes the quota's lock and checks the call against the
// usage it counts, inside tx. Without a quota it does nothing.
func (s *Store) withinQuota(ctx context.Context, tx pgx.Tx, c call) error {
	q := c.quota
	if q == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockQuota, s.Schema+"/"+fencedstore.QuotaSegment(q.Prefix)); err != nil {
		return err
	}
	var u fencedstore.Usage
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), coalesce(sum(size), 0), coalesce(max(size) FILTER (WHERE key = $3), -1)
		FROM %s WHERE key >= $1 AND ($2 = '' OR key < $2) AND deleted IS NULL`, s.keys), q.Prefix, prefixEnd(q.Prefix), c.key).Scan(&u.Keys, &u.Bytes, &u.KeySize)
	if err != nil {
		return err
	}
	return fencedstore.CheckQuota(*q, u, c.body != nil, int64(len(c.body)))
}

// RaiseFloor implements fencedstore.Store.
func (s *Store) RaiseFloor(ctx context.Context, job string, tok fencedstore.Token) (fencedstore.Token, error) {
	if err := fencedstore.ValidateFloor(job, tok); err != nil {
		return fencedstore.Token{}, err
	}
	if s.closed.Load() {
		return fencedstore.Token{}, fencedstore.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fencedstore.Token{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.OpTimeout)
	defer cancel()
	var e, q int64
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockJobFloor, s.Schema+"/"+job); err != nil {
			return err
		}
		// Only raise: the row keeps the greater of the two.
		return tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %[1]s AS f (job, epoch, seq, raised) VALUES ($1, $2, $3, $4)
			ON CONFLICT (job) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq, raised = excluded.raised
				WHERE (f.epoch, f.seq) < (excluded.epoch, excluded.seq)
			RETURNING epoch, seq`, s.jobFloors), job, int64(tok.Epoch), int64(tok.Seq), s.Now().UTC()).Scan(&e, &q)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// Already at or above tok: nothing was written; read it.
		err = s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT epoch, seq FROM %s WHERE job = $1`, s.jobFloors), job).Scan(&e, &q)
	}
	if err != nil {
		return fencedstore.Token{}, s.fail("raise floor of job", job, err)
	}
	return fencedstore.Token{Epoch: uint64(e), Seq: uint64(q)}, nil
}

// jobFloor takes the job's floor lock shared and reads its floor (zero:
// none, or no job), inside tx.
func (s *Store) jobFloor(ctx context.Context, tx pgx.Tx, job string) (fencedstore.Token, error) {
	if job == "" {
		return fencedstore.Token{}, nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, hashtext($2))`, lockJobFloor, s.Schema+"/"+job); err != nil {
		return fencedstore.Token{}, err
	}
	var e, q int64
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT epoch, seq FROM %s WHERE job = $1`, s.jobFloors), job).Scan(&e, &q)
	if errors.Is(err, pgx.ErrNoRows) {
		return fencedstore.Token{}, nil
	}
	return fencedstore.Token{Epoch: uint64(e), Seq: uint64(q)}, err
}

// maxRetries bounds retries of a transaction the server aborted for a
// serialization failure or deadlock (neither is expected with one row lock).
const maxRetries = 3

// decide runs one call's transaction; rule decides from the locked row.
func (s *Store) decide(ctx context.Context, op string, c call, rule rule) (fencedstore.Result, error) {
	if s.closed.Load() {
		return fencedstore.Result{}, fencedstore.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fencedstore.Result{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.OpTimeout)
	defer cancel()
	for try := 1; ; try++ {
		res, committing, err := s.decideOnce(ctx, c, rule)
		if err == nil || fencedstore.IsDecision(err) {
			return res, err
		}
		if errors.Is(err, fencedstore.ErrQuota) {
			return fencedstore.Result{}, fmt.Errorf("%s %s: %w", op, c.key, err)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01") && try < maxRetries {
			continue
		}
		if committing {
			err = fmt.Errorf("%w (the commit was sent: the outcome is unknown; repeating the same call is safe)", err)
		}
		return fencedstore.Result{}, s.fail(op, c.key, err)
	}
}

// decideOnce is one try of decide. committing says an error came from the
// commit, so the caller cannot know whether the call took effect.
func (s *Store) decideOnce(ctx context.Context, c call, rule rule) (res fencedstore.Result, committing bool, err error) {
	key := c.key
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return res, false, err
	}
	defer tx.Rollback(ctx)

	// The job's floor first, then the quota, then the key's row: the
	// locks always in this order, each held until the commit. The quota
	// is counted before the key's row is made, so a new key is counted
	// as new.
	floor, err := s.jobFloor(ctx, tx, c.job)
	if err != nil {
		return res, false, err
	}
	if err := s.withinQuota(ctx, tx, c); err != nil {
		return res, false, err
	}
	row, inserted, err := s.lockKey(ctx, tx, key)
	if err != nil {
		return res, false, err
	}

	// Decide, then write the decision guarded by what was read. The
	// clock is cut to PostgreSQL's microseconds first, so the recorded
	// time is the one the rules (and an expiry) were judged at.
	now := s.Now().UTC().Truncate(time.Microsecond)
	var decisions []fencedstore.Decision
	if inserted {
		// A key with no record under a retention floor is a tombstone
		// holding the floor (fencedstore.Retention).
		floor, prefix, err := s.floorOf(ctx, tx, key)
		if err != nil {
			return res, false, err
		}
		if !floor.IsZero() {
			var d fencedstore.Decision
			row.meta, d = fencedstore.DecideDelete(fencedstore.Meta{Key: key, Greatest: floor}, now)
			decisions, row.deletedBy = append(decisions, d), prefix
		}
	}
	next, d := rule(row.meta, floor, now)
	decisions = append(decisions, d)
	if d.Outcome == fencedstore.Established || (d.Outcome == fencedstore.Applied && next.Version != row.meta.Version) {
		row.touched = now
	}
	if next.Deleted.IsZero() {
		row.deletedBy = ""
	}
	b, guard := s.queueWrite(key, row, next, decisions, c.body)
	if err := execGuarded(ctx, tx, b, guard, key); err != nil {
		return res, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, true, err
	}
	return fencedstore.Result{Outcome: d.Outcome, Key: key, Version: next.Version, Greatest: next.Greatest, Floor: d.Floor}, false, d.Err()
}

// keyRow is a key's row as read under its lock: what the rules decide
// from, and what the write is guarded by and carries over.
type keyRow struct {
	meta                fencedstore.Meta
	histFirst, histNext int64
	touched             time.Time
	deletedBy           string
}

// lockKey locks the key's row, creating it if new (inserted), and reads it.
// Insert and select go in one batch to save a round trip while the job's
// floor and the quota are held.
func (s *Store) lockKey(ctx context.Context, tx pgx.Tx, key string) (row keyRow, inserted bool, err error) {
	b := &pgx.Batch{}
	b.Queue(fmt.Sprintf(`INSERT INTO %s (key) VALUES ($1) ON CONFLICT (key) DO NOTHING RETURNING true`, s.keys), key)
	b.Queue(fmt.Sprintf(`SELECT version, greatest_epoch, greatest_seq, token_epoch, token_seq, attempt, hash, size, updated, hist_first, hist_next, touched, deleted, coalesce(deleted_by, '')
		FROM %s WHERE key = $1 FOR UPDATE`, s.keys), key)
	br := tx.SendBatch(ctx, b)
	rows, err := br.Query()
	if err == nil {
		inserted = rows.Next()
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		br.Close()
		return row, false, err
	}
	m := &row.meta
	var ge, gs, te, ts int64
	var updated, deleted *time.Time
	err = br.QueryRow().Scan(&m.Version, &ge, &gs, &te, &ts, &m.Attempt, &m.Hash, &m.Size, &updated, &row.histFirst, &row.histNext, &row.touched, &deleted, &row.deletedBy)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return row, false, err
	}
	m.Key = key
	m.Greatest = fencedstore.Token{Epoch: uint64(ge), Seq: uint64(gs)}
	m.Token = fencedstore.Token{Epoch: uint64(te), Seq: uint64(ts)}
	if updated != nil {
		m.Updated = *updated
	}
	if deleted != nil {
		m.Deleted = deleted.UTC()
	}
	return row, inserted, nil
}

// queueWrite queues the write of a decided call: the versions kept, the
// key's row (at index guard, guarded by the version and history position
// read under the lock, so a write that lost the row is caught rather than
// applied twice), the decisions' history and its trim.
func (s *Store) queueWrite(key string, row keyRow, next fencedstore.Meta, decisions []fencedstore.Decision, body []byte) (b *pgx.Batch, guard int) {
	m := row.meta
	newNext := row.histNext + int64(len(decisions))
	newFirst := max(row.histFirst, newNext-int64(s.HistoryRetention))
	b = &pgx.Batch{}
	if next.Version != m.Version {
		if m.Version > 0 && m.Deleted.IsZero() && s.KeepVersions > 1 {
			b.Queue(fmt.Sprintf(`INSERT INTO %s (key, version, token_epoch, token_seq, greatest_epoch, greatest_seq, attempt, hash, size, updated, body)
				SELECT key, version, token_epoch, token_seq, greatest_epoch, greatest_seq, attempt, hash, size, updated, coalesce(body, '')
				FROM %s WHERE key = $1`, s.vers, s.keys), key)
		}
		b.Queue(fmt.Sprintf(`DELETE FROM %s WHERE key = $1 AND version <= $2`, s.vers), key, int64(next.Version)-int64(s.KeepVersions))
	}
	set := `version = $4, greatest_epoch = $5, greatest_seq = $6, token_epoch = $7, token_seq = $8,
		attempt = $9, hash = $10, size = $11, updated = $12, hist_first = $13, hist_next = $14,
		touched = $15, deleted = $16, deleted_by = nullif($17, '')`
	args := []any{key, int64(m.Version), row.histNext,
		int64(next.Version), int64(next.Greatest.Epoch), int64(next.Greatest.Seq), int64(next.Token.Epoch), int64(next.Token.Seq),
		next.Attempt, next.Hash, next.Size, nullTime(next.Updated), newFirst, newNext,
		row.touched, nullTime(next.Deleted), row.deletedBy}
	if next.Version != m.Version {
		set += `, body = $18`
		args = append(args, body)
	}
	guard = len(b.QueuedQueries)
	b.Queue(fmt.Sprintf(`UPDATE %s SET %s WHERE key = $1 AND version = $2 AND hist_next = $3`, s.keys, set), args...)
	for i, d := range decisions {
		var fe, fs *int64
		if !d.Floor.IsZero() {
			e, q := int64(d.Floor.Epoch), int64(d.Floor.Seq)
			fe, fs = &e, &q
		}
		b.Queue(fmt.Sprintf(`INSERT INTO %s (key, n, outcome, token_epoch, token_seq, attempt, version, greatest_epoch, greatest_seq, hash, at, expires, floor_epoch, floor_seq)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, s.hist),
			key, row.histNext+int64(i), string(d.Outcome), int64(d.Token.Epoch), int64(d.Token.Seq), d.Attempt, int64(d.Version),
			int64(d.Greatest.Epoch), int64(d.Greatest.Seq), d.Hash, d.Time, nullTime(d.Expires), fe, fs)
	}
	if newFirst > row.histFirst {
		b.Queue(fmt.Sprintf(`DELETE FROM %s WHERE key = $1 AND n < $2`, s.hist), key, newFirst)
	}
	return b, guard
}

// execGuarded runs b, stopping at the first error, and fails if the
// statement at index guard did not change exactly one row: the row's
// lock should make that impossible, so it is reported, never ignored.
func execGuarded(ctx context.Context, tx pgx.Tx, b *pgx.Batch, guard int, key string) error {
	br := tx.SendBatch(ctx, b)
	var err error
	for i := 0; err == nil && i < b.Len(); i++ {
		tag, e := br.Exec()
		if err = e; err == nil && i == guard && tag.RowsAffected() != 1 {
			err = fmt.Errorf("the row of %s changed under its lock", key)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Get implements fencedstore.Store.
func (s *Store) Get(ctx context.Context, key string) (fencedstore.Object, error) {
	if err := fencedstore.ValidateKey(key); err != nil {
		return fencedstore.Object{}, err
	}
	if s.closed.Load() {
		return fencedstore.Object{}, fencedstore.ErrClosed
	}
	row := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT %s, body FROM %s WHERE key = $1 AND version > 0 AND deleted IS NULL`, metaColumns, s.keys), key)
	var obj fencedstore.Object
	m, err := scanMeta(row, &obj.Body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return obj, fmt.Errorf("get %s: %w", key, fencedstore.ErrNotFound)
	case err != nil:
		return obj, s.fail("get", key, err)
	}
	obj.Meta = m
	return obj, nil
}

const metaColumns = `key, version, greatest_epoch, greatest_seq, token_epoch, token_seq, attempt, hash, size, updated`

func scanMeta(row pgx.Row, extra ...any) (fencedstore.Meta, error) {
	var m fencedstore.Meta
	var ge, gs, te, ts int64
	var updated *time.Time
	dest := append([]any{&m.Key, &m.Version, &ge, &gs, &te, &ts, &m.Attempt, &m.Hash, &m.Size, &updated}, extra...)
	if err := row.Scan(dest...); err != nil {
		return m, err
	}
	m.Greatest = fencedstore.Token{Epoch: uint64(ge), Seq: uint64(gs)}
	m.Token = fencedstore.Token{Epoch: uint64(te), Seq: uint64(ts)}
	if updated != nil {
		m.Updated = updated.UTC()
	}
	return m, nil
}

// List implements fencedstore.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]fencedstore.Meta, error) {
	if err := fencedstore.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, fencedstore.ErrClosed
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE key >= $1 AND ($2 = '' OR key < $2) AND deleted IS NULL ORDER BY key`, metaColumns, s.keys), prefix, prefixEnd(prefix))
	if err != nil {
		return nil, s.fail("list", prefix, err)
	}
	defer rows.Close()
	var out []fencedstore.Meta
	for rows.Next() {
		m, err := scanMeta(rows)
		if err != nil {
			return nil, s.fail("list", prefix, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("list", prefix, err)
	}
	return out, nil
}

// History implements fencedstore.Store.
func (s *Store) History(ctx context.Context, key string) ([]fencedstore.Decision, error) {
	if err := fencedstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, fencedstore.ErrClosed
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT outcome, token_epoch, token_seq, attempt, version, greatest_epoch, greatest_seq, hash, at, expires,
		coalesce(floor_epoch, 0), coalesce(floor_seq, 0)
		FROM %s WHERE key = $1 ORDER BY n`, s.hist), key)
	if err != nil {
		return nil, s.fail("history", key, err)
	}
	defer rows.Close()
	var out []fencedstore.Decision
	for rows.Next() {
		var d fencedstore.Decision
		var outcome string
		var te, ts, v, ge, gs, fe, fs int64
		var expires *time.Time
		if err := rows.Scan(&outcome, &te, &ts, &d.Attempt, &v, &ge, &gs, &d.Hash, &d.Time, &expires, &fe, &fs); err != nil {
			return nil, s.fail("history", key, err)
		}
		if expires != nil {
			d.Expires = expires.UTC()
		}
		d.Outcome = fencedstore.Outcome(outcome)
		d.Token = fencedstore.Token{Epoch: uint64(te), Seq: uint64(ts)}
		d.Greatest = fencedstore.Token{Epoch: uint64(ge), Seq: uint64(gs)}
		d.Floor = fencedstore.Token{Epoch: uint64(fe), Seq: uint64(fs)}
		d.Version = uint64(v)
		d.Time = d.Time.UTC()
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("history", key, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("history %s: %w", key, fencedstore.ErrNotFound)
	}
	return out, nil
}

// fail wraps err for op on key, marking a database that cannot be reached
// or is shutting down as ErrUnavailable.
func (s *Store) fail(op, key string, err error) error {
	what := op
	if key != "" {
		what += " " + key
	}
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", what, fencedstore.ErrClosed)
	}
	if unavailable(err) {
		return fmt.Errorf("%s: %w: postgres at %s: %v", what, fencedstore.ErrUnavailable, s.where, err)
	}
	return fmt.Errorf("%s: postgres at %s: %w", what, s.where, err)
}

// unavailable reports whether err means the database could not be reached
// or would not serve, rather than that it refused a statement.
func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || // connection exception
			strings.HasPrefix(c, "53") || // insufficient resources
			strings.HasPrefix(c, "57P") // shutdown, cannot connect now
	}
	return !errors.Is(err, context.Canceled)
}

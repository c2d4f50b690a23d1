package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema and its migrations.
//
// fencecron_schema records which migrations a schema has had, one row per
// version. Open applies the missing ones in order, in one transaction
// under an advisory lock, so nodes starting together migrate once and a
// failed migration leaves the schema as it was. A schema made by a newer
// fencecron (a version this one does not know) is refused rather than
// written to with rules that may no longer hold.
//
// A schema made before versions were recorded (fencecron 0.x: the tables
// exist, fencecron_schema does not) is taken as version 1; migration 1 is
// written to be a no-op on it (IF NOT EXISTS throughout), which also
// covers the oldest schemas, whose history had no expires column.

// SchemaVersion is the schema version this code writes.
const SchemaVersion = 3

// migrationLock is the advisory lock Open takes while it migrates.
const migrationLock = 7283461001

// migrations[i] takes a schema from version i to i+1. %[1]s is the schema,
// %[2]s fencecron_keys, %[3]s fencecron_history, %[4]s fencecron_versions,
// %[5]s fencecron_floors, %[6]s fencecron_schema, %[7]s fencecron_job_floors.
var migrations = []string{
	// 1: keys with their body and greatest token, and the decisions.
	`
CREATE TABLE IF NOT EXISTS %[2]s (
	key            text COLLATE "C" PRIMARY KEY,
	version        bigint NOT NULL DEFAULT 0,
	greatest_epoch bigint NOT NULL DEFAULT 0,
	greatest_seq   bigint NOT NULL DEFAULT 0,
	token_epoch    bigint NOT NULL DEFAULT 0,
	token_seq      bigint NOT NULL DEFAULT 0,
	attempt        text   NOT NULL DEFAULT '',
	hash           text   NOT NULL DEFAULT '',
	size           bigint NOT NULL DEFAULT 0,
	updated        timestamptz,
	body           bytea,
	hist_first     bigint NOT NULL DEFAULT 0,
	hist_next      bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS %[3]s (
	key            text COLLATE "C" NOT NULL,
	n              bigint NOT NULL,
	outcome        text   NOT NULL,
	token_epoch    bigint NOT NULL,
	token_seq      bigint NOT NULL,
	attempt        text   NOT NULL,
	version        bigint NOT NULL,
	greatest_epoch bigint NOT NULL,
	greatest_seq   bigint NOT NULL,
	hash           text   NOT NULL,
	at             timestamptz NOT NULL,
	PRIMARY KEY (key, n)
);
ALTER TABLE %[3]s ADD COLUMN IF NOT EXISTS expires timestamptz;`,

	// 2: retention (tombstones, floors, the age of a key), kept versions,
	// the indexes the queries need, and comments.
	`
ALTER TABLE %[2]s ADD COLUMN touched timestamptz NOT NULL DEFAULT 'epoch';
UPDATE %[2]s SET touched = updated WHERE updated IS NOT NULL;
ALTER TABLE %[2]s ADD COLUMN deleted timestamptz;
ALTER TABLE %[2]s ADD COLUMN deleted_by text;
CREATE TABLE %[4]s (
	key            text COLLATE "C" NOT NULL,
	version        bigint NOT NULL,
	token_epoch    bigint NOT NULL,
	token_seq      bigint NOT NULL,
	greatest_epoch bigint NOT NULL,
	greatest_seq   bigint NOT NULL,
	attempt        text   NOT NULL,
	hash           text   NOT NULL,
	size           bigint NOT NULL,
	updated        timestamptz,
	body           bytea  NOT NULL,
	PRIMARY KEY (key, version)
);
CREATE TABLE %[5]s (
	prefix text COLLATE "C" PRIMARY KEY,
	epoch  bigint NOT NULL,
	seq    bigint NOT NULL
);
CREATE INDEX fencecron_keys_touched ON %[2]s (touched, key) WHERE deleted IS NULL;
CREATE INDEX fencecron_keys_deleted ON %[2]s (deleted) WHERE deleted IS NOT NULL;
CREATE INDEX fencecron_history_at ON %[3]s (at);
COMMENT ON TABLE %[6]s IS 'fencecron: the schema migrations applied, one row per version';
COMMENT ON TABLE %[2]s IS 'fencecron fenced store: one row per key, live or a tombstone (deleted set)';
COMMENT ON COLUMN %[2]s.key IS 'the key, e.g. reports/2026-07.csv; C collation so prefix ranges use the primary key';
COMMENT ON COLUMN %[2]s.version IS 'version of the current body; 0: never written (or a tombstone)';
COMMENT ON COLUMN %[2]s.greatest_epoch IS 'greatest fence token accepted or established (epoch part); a tombstone keeps it';
COMMENT ON COLUMN %[2]s.greatest_seq IS 'greatest fence token accepted or established (seq part)';
COMMENT ON COLUMN %[2]s.token_epoch IS 'token of the write that made the current body (epoch part)';
COMMENT ON COLUMN %[2]s.token_seq IS 'token of the write that made the current body (seq part)';
COMMENT ON COLUMN %[2]s.attempt IS 'attempt that made the current body';
COMMENT ON COLUMN %[2]s.hash IS 'sha256 of the current body, hex';
COMMENT ON COLUMN %[2]s.size IS 'size of the current body in bytes';
COMMENT ON COLUMN %[2]s.updated IS 'when the current body was written';
COMMENT ON COLUMN %[2]s.body IS 'the current body';
COMMENT ON COLUMN %[2]s.hist_first IS 'n of the oldest retained history entry';
COMMENT ON COLUMN %[2]s.hist_next IS 'n of the next history entry';
COMMENT ON COLUMN %[2]s.touched IS 'last accepted write or establish: the age retention judges';
COMMENT ON COLUMN %[2]s.deleted IS 'set: retention deleted the key at this time and the row is its tombstone';
COMMENT ON COLUMN %[2]s.deleted_by IS 'prefix of the retention rule that deleted the key';
COMMENT ON TABLE %[3]s IS 'fencecron fenced store: every decision on a key, append-only, the last store.history_retention kept';
COMMENT ON COLUMN %[3]s.n IS 'position in the key''s history';
COMMENT ON COLUMN %[3]s.outcome IS 'applied, established, stale_owner, conflict, expired or deleted';
COMMENT ON COLUMN %[3]s.token_epoch IS 'the call''s token (epoch part)';
COMMENT ON COLUMN %[3]s.token_seq IS 'the call''s token (seq part)';
COMMENT ON COLUMN %[3]s.version IS 'the key''s version after the decision';
COMMENT ON COLUMN %[3]s.greatest_epoch IS 'the key''s greatest token when the call arrived (epoch part)';
COMMENT ON COLUMN %[3]s.greatest_seq IS 'the key''s greatest token when the call arrived (seq part)';
COMMENT ON COLUMN %[3]s.hash IS 'sha256 of the published body, hex';
COMMENT ON COLUMN %[3]s.at IS 'when the store decided';
COMMENT ON COLUMN %[3]s.expires IS 'the call''s token expiry, if it carried one';
COMMENT ON TABLE %[4]s IS 'fencecron fenced store: earlier bodies of a key, the last store.keep_versions - 1';
COMMENT ON TABLE %[5]s IS 'fencecron fenced store: per retention prefix, the greatest token of the tombstones dropped; no token up to it writes under the prefix';`,

	// 3: job floors (a forced release revokes a job's tokens up to the
	// released one), and the floor a refusal names in the history.
	`
CREATE TABLE %[7]s (
	job    text COLLATE "C" PRIMARY KEY,
	epoch  bigint NOT NULL,
	seq    bigint NOT NULL,
	raised timestamptz NOT NULL
);
ALTER TABLE %[3]s ADD COLUMN floor_epoch bigint;
ALTER TABLE %[3]s ADD COLUMN floor_seq bigint;
COMMENT ON TABLE %[7]s IS 'fencecron fenced store: per job, the floor a forced release raised; no token of the job up to it writes any key';
COMMENT ON COLUMN %[7]s.raised IS 'when the floor was last raised';
COMMENT ON COLUMN %[3]s.floor_epoch IS 'on a stale_owner refusal by the job''s floor: that floor (epoch part)';
COMMENT ON COLUMN %[3]s.floor_seq IS 'on a stale_owner refusal by the job''s floor: that floor (seq part)';`,
}

// migrate brings the schema to SchemaVersion under an advisory lock.
func (s *Store) migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return err
		}
		schema := pgx.Identifier{s.Schema}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
			return err
		}
		var hasVersions, hasKeys bool
		err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, s.schemaT, s.keys).Scan(&hasVersions, &hasKeys)
		if err != nil {
			return err
		}
		current := 0
		if hasVersions {
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s.schemaT).Scan(&current); err != nil {
				return err
			}
		} else {
			if _, err := tx.Exec(ctx, `CREATE TABLE `+s.schemaT+` (version int PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
			// A schema made before versions were recorded (hasKeys)
			// is at version 1, but migration 1 is run on it anyway:
			// it is a no-op there, and brings the oldest up to it.
			_ = hasKeys
		}
		if current > SchemaVersion {
			return fmt.Errorf("%w: schema %s is at version %d, and this fencecron knows versions up to %d: upgrade fencecron", errNewerSchema, s.Schema, current, SchemaVersion)
		}
		for v := current; v < len(migrations); v++ {
			sql := fmt.Sprintf(migrations[v], schema, s.keys, s.hist, s.vers, s.floors, s.schemaT, s.jobFloors)
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("migrate schema %s to version %d: %w", s.Schema, v+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+s.schemaT+` (version) VALUES ($1)`, v+1); err != nil {
				return err
			}
		}
		return nil
	})
}

var errNewerSchema = errors.New("schema from a newer fencecron")

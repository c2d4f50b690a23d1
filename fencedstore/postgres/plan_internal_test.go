package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"reports/": "reports0", "a": "b", "é": "ê", "\u00ff": "\u0100", "x\U0010FFFF": "y", "\ud7ff": "\ue000", "": ""} {
		if got := prefixEnd(in); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

// The retention and listing queries use the indexes the migration made
// (checked with sequential scans discouraged, as on a large table).
func TestStore_QueriesUseIndexes(t *testing.T) {
	url := os.Getenv("FENCECRON_TEST_POSTGRES")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("FENCECRON_TEST_POSTGRES is not set")
		}
		t.Skip("FENCECRON_TEST_POSTGRES is not set; see postgres_test.go")
	}
	var b [6]byte
	rand.Read(b[:])
	s := New(url)
	s.Schema = "fencecron_test_" + hex.EncodeToString(b[:])
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func() {
		s.pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.Schema}.Sanitize()+" CASCADE")
		s.Close()
	}()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, q := range []struct {
		name, sql, index string
		args             []any
	}{
		{"sweep by age", s.pickSQL(`AND touched < $4`), "fencecron_keys_touched", []any{"reports/", "reports0", 10, now}},
		{"count under a prefix", s.countSQL(), "Index Cond: ((key >= 'reports/'::text) AND (key < 'reports0'::text))", []any{"reports/", "reports0"}},
		{"drop tombstones", s.dropSQL(), "fencecron_keys_deleted", []any{now, 10}},
		{"list a page", s.listPageSQL("reports/"), "fencecron_keys_pkey", []any{"reports/", "", "reports0", 101}},
		{"decisions since", `SELECT key FROM ` + s.hist + ` WHERE at > $1`, "fencecron_history_at", []any{now}},
	} {
		rows, err := conn.Query(ctx, "EXPLAIN "+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if plan := strings.Join(lines, "\n"); !strings.Contains(plan, q.index) || strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s does not use %s:\n%s", q.name, q.index, plan)
		}
	}
}

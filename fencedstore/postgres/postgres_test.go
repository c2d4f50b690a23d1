package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/postgres"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

// testURLEnv names the database the tests use; .ci/run sets it.
const testURLEnv = "FENCECRON_TEST_POSTGRES"

var (
	probeOnce sync.Once
	probeURL  string
	probeWhy  string // why the database cannot be used, or ""
)

// testURL returns the test database's URL, or skips the test (fails it
// under CI=true) when it is not configured or not reachable. The database
// is probed once per test binary.
func testURL(t testing.TB) string {
	t.Helper()
	probeOnce.Do(func() {
		probeURL = os.Getenv(testURLEnv)
		if probeURL == "" {
			probeWhy = testURLEnv + " is not set"
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, probeURL)
		if err != nil {
			probeWhy = "cannot connect to " + testURLEnv + ": " + err.Error()
			return
		}
		conn.Close(ctx)
	})
	if probeWhy == "" {
		return probeURL
	}
	msg := probeWhy + `; to run the PostgreSQL tests, start PostgreSQL and set ` + testURLEnv +
		`="postgres://fencecron@127.0.0.1:5432/fencecron_test?sslmode=disable" (.ci/run does both)`
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// newSchema returns a fresh schema name, dropped when the test ends.
func newSchema(t testing.TB, url string) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	schema := "fencecron_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

func open(t testing.TB, url, schema string, o storetest.Options) *postgres.Store {
	t.Helper()
	s := postgres.New(url)
	s.Schema = schema
	if o.MaxBodyBytes != 0 {
		s.MaxBodyBytes = o.MaxBodyBytes
	}
	if o.HistoryRetention != 0 {
		s.HistoryRetention = o.HistoryRetention
	}
	if o.Now != nil {
		s.Now = o.Now
	}
	if o.KeepVersions != 0 {
		s.KeepVersions = o.KeepVersions
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStoreWith(t *testing.T, o storetest.Options) fencedstore.Store {
	url := testURL(t)
	return open(t, url, newSchema(t, url), o)
}

func newStore(t *testing.T) fencedstore.Store { return newStoreWith(t, storetest.Options{}) }

func TestStore_Conformance(t *testing.T) {
	testURL(t)
	storetest.Run(t, newStore)
	storetest.RunLimits(t, newStoreWith)
	storetest.RunRetention(t, newStoreWith)
	storetest.RunQuota(t, newStore)
}

// Two stores on one schema (two nodes) see one state, and opening an
// existing schema keeps it.
func TestStore_SharedAndReopened(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	a := open(t, url, schema, storetest.Options{})
	b := open(t, url, schema, storetest.Options{})
	ctx := context.Background()
	if _, err := a.Establish(ctx, fencedstore.EstablishRequest{Key: "reports/x", Token: storetest.T(5, 1), Attempt: "w5"}); err != nil {
		t.Fatal(err)
	}
	if res, err := b.Publish(ctx, fencedstore.PublishRequest{Key: "reports/x", Token: storetest.T(4, 9), Attempt: "w4", Body: []byte("late")}); !errors.Is(err, fencedstore.ErrStaleOwner) {
		t.Fatalf("publish through the second store with an older token: %+v, %v; want stale_owner", res, err)
	}
	a.Close()
	c := open(t, url, schema, storetest.Options{})
	metas, err := c.List(ctx, "reports/")
	if err != nil || len(metas) != 1 || metas[0].Greatest != storetest.T(5, 1) {
		t.Fatalf("after reopening: %+v, %v", metas, err)
	}
}

// A PostgreSQL that cannot be reached is a clear ErrUnavailable, at Open
// and for calls, and a call that failed so wrote nothing.
func TestStore_Unavailable(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		s := postgres.New("postgres://fencecron:secret-password@" + addr + "/fencecron_test?sslmode=disable")
		s.ConnectTimeout = 2 * time.Second
		err = s.Open()
		if !errors.Is(err, fencedstore.ErrUnavailable) {
			t.Fatalf("open with nothing listening: err = %v, want ErrUnavailable", err)
		}
		if strings.Contains(err.Error(), "secret-password") {
			t.Errorf("the error shows the password: %v", err)
		}
		t.Logf("%v", err)
	})
	t.Run("calls", func(t *testing.T) {
		url := testURL(t)
		schema := newSchema(t, url)
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		p := startProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
		proxied := strings.Replace(url, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), p.addr(), 1)
		s := postgres.New(proxied)
		s.Schema = schema
		s.ConnectTimeout = 2 * time.Second
		if err := s.Open(); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "reports/x", Token: storetest.T(1, 1), Attempt: "a", Body: []byte("one")}); err != nil {
			t.Fatal(err)
		}

		p.stop() // the database goes away
		_, err = s.Publish(ctx, fencedstore.PublishRequest{Key: "reports/x", Token: storetest.T(1, 2), Attempt: "b", Body: []byte("two")})
		if !errors.Is(err, fencedstore.ErrUnavailable) {
			t.Fatalf("publish with the database gone: err = %v, want ErrUnavailable", err)
		}
		t.Logf("publish: %v", err)
		if _, err := s.Get(ctx, "reports/x"); !errors.Is(err, fencedstore.ErrUnavailable) {
			t.Errorf("get with the database gone: err = %v, want ErrUnavailable", err)
		}

		p.start() // and comes back: the pool reconnects
		direct := open(t, url, schema, storetest.Options{})
		obj, err := direct.Get(ctx, "reports/x")
		if err != nil || string(obj.Body) != "one" || obj.Version != 1 || obj.Greatest != storetest.T(1, 1) {
			t.Fatalf("after the outage: %+v %q, %v; want version 1 %q", obj.Meta, obj.Body, err, "one")
		}
		if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "reports/x", Token: storetest.T(1, 3), Attempt: "c", Body: []byte("three")}); err != nil {
			t.Fatalf("publish after the database came back: %v", err)
		}
	})
}

// proxy forwards TCP connections to the database; stop closes the
// listener and every connection, as if the database had gone.
type proxy struct {
	t      testing.TB
	target string
	mu     sync.Mutex
	ln     net.Listener
	port   string
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startProxy(t testing.TB, target string) *proxy {
	p := &proxy{t: t, target: target}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) addr() string { return "127.0.0.1:" + p.port }

func (p *proxy) start() {
	addr := "127.0.0.1:0"
	if p.port != "" {
		addr = "127.0.0.1:" + p.port
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	_, p.port, _ = net.SplitHostPort(ln.Addr().String())
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(up, c); up.Close() })
			p.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
}

func (p *proxy) stop() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func newBenchStore(b *testing.B) fencedstore.Store {
	url := testURL(b)
	return open(b, url, newSchema(b, url), storetest.Options{})
}

func BenchmarkPublish1KiB(b *testing.B) {
	b.Run("sequential", func(b *testing.B) { storetest.BenchPublish(b, newBenchStore(b), false, 0) })
	b.Run("parallel", func(b *testing.B) { storetest.BenchPublish(b, newBenchStore(b), true, 8) })
}

func BenchmarkPublishStale(b *testing.B) {
	b.Run("sequential", func(b *testing.B) { storetest.BenchStale(b, newBenchStore(b), false, 0) })
	b.Run("parallel", func(b *testing.B) { storetest.BenchStale(b, newBenchStore(b), true, 8) })
}

// Close closes the pool: no goroutine outlives the store.
func TestStore_CloseLeavesNoGoroutines(t *testing.T) {
	url := testURL(t)
	s := postgres.New(url)
	s.Schema = newSchema(t, url)
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(context.Background(), fencedstore.PublishRequest{Key: "k", Token: storetest.T(1, 1), Attempt: "a", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	goleak.VerifyNone(t)
	if _, err := s.Get(context.Background(), "k"); !errors.Is(err, fencedstore.ErrClosed) {
		t.Errorf("get after close: err = %v, want ErrClosed", err)
	}
}

// A schema made before decisions recorded expiries (no expires column in
// fencecron_history) is migrated on Open: its history reads back, and new
// decisions record their expiry.
func TestStore_MigratesHistoryWithoutExpires(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	ctx := context.Background()
	conn := connect(t, url)
	s := pgx.Identifier{schema}.Sanitize()
	_, err := conn.Exec(ctx, `CREATE SCHEMA `+s+`;
CREATE TABLE `+s+`.fencecron_keys (
	key text COLLATE "C" PRIMARY KEY, version bigint NOT NULL DEFAULT 0,
	greatest_epoch bigint NOT NULL DEFAULT 0, greatest_seq bigint NOT NULL DEFAULT 0,
	token_epoch bigint NOT NULL DEFAULT 0, token_seq bigint NOT NULL DEFAULT 0,
	attempt text NOT NULL DEFAULT '', hash text NOT NULL DEFAULT '', size bigint NOT NULL DEFAULT 0,
	updated timestamptz, body bytea, hist_first bigint NOT NULL DEFAULT 0, hist_next bigint NOT NULL DEFAULT 0);
CREATE TABLE `+s+`.fencecron_history (
	key text COLLATE "C" NOT NULL, n bigint NOT NULL, outcome text NOT NULL,
	token_epoch bigint NOT NULL, token_seq bigint NOT NULL, attempt text NOT NULL, version bigint NOT NULL,
	greatest_epoch bigint NOT NULL, greatest_seq bigint NOT NULL, hash text NOT NULL, at timestamptz NOT NULL,
	PRIMARY KEY (key, n));
INSERT INTO `+s+`.fencecron_keys (key, greatest_epoch, greatest_seq, hist_next) VALUES ('reports/old', 1, 1, 1);
INSERT INTO `+s+`.fencecron_history VALUES ('reports/old', 0, 'established', 1, 1, 'w1', 0, 0, 0, '', now());`)
	if err != nil {
		t.Fatal(err)
	}
	st := open(t, url, schema, storetest.Options{})
	expires := time.Unix(1_000_000_000, 0).UTC()
	if _, err := st.Establish(ctx, fencedstore.EstablishRequest{Key: "reports/old", Token: storetest.T(2, 1), Attempt: "w2", Expires: expires}); !errors.Is(err, fencedstore.ErrExpired) {
		t.Fatalf("establish with a long-expired token: err = %v, want ErrExpired", err)
	}
	h, err := st.History(ctx, "reports/old")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Outcome != fencedstore.Established || !h[0].Expires.IsZero() || h[1].Outcome != fencedstore.Expired || !h[1].Expires.Equal(expires) {
		t.Fatalf("history after the migration = %+v", h)
	}
}

// oldSchema is the schema fencecron made before schema versions (the last
// code without them): no fencecron_schema, no retention columns.
const oldSchema = `CREATE SCHEMA %[1]s;
CREATE TABLE %[1]s.fencecron_keys (
	key text COLLATE "C" PRIMARY KEY, version bigint NOT NULL DEFAULT 0,
	greatest_epoch bigint NOT NULL DEFAULT 0, greatest_seq bigint NOT NULL DEFAULT 0,
	token_epoch bigint NOT NULL DEFAULT 0, token_seq bigint NOT NULL DEFAULT 0,
	attempt text NOT NULL DEFAULT '', hash text NOT NULL DEFAULT '', size bigint NOT NULL DEFAULT 0,
	updated timestamptz, body bytea, hist_first bigint NOT NULL DEFAULT 0, hist_next bigint NOT NULL DEFAULT 0);
CREATE TABLE %[1]s.fencecron_history (
	key text COLLATE "C" NOT NULL, n bigint NOT NULL, outcome text NOT NULL,
	token_epoch bigint NOT NULL, token_seq bigint NOT NULL, attempt text NOT NULL, version bigint NOT NULL,
	greatest_epoch bigint NOT NULL, greatest_seq bigint NOT NULL, hash text NOT NULL, at timestamptz NOT NULL,
	PRIMARY KEY (key, n));
ALTER TABLE %[1]s.fencecron_history ADD COLUMN IF NOT EXISTS expires timestamptz;`

// A schema the previous fencecron made, with data in it, is migrated in
// place on Open: the keys, bodies and history are kept, the schema is at
// SchemaVersion with its comments and indexes, a key written before is
// judged by its old update time for retention, and the old greatest
// tokens still fence.
func TestStore_MigratesOldSchemaInPlace(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	ctx := context.Background()
	conn := connect(t, url)
	q := pgx.Identifier{schema}.Sanitize()
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := conn.Exec(ctx, fmt.Sprintf(oldSchema, q)); err != nil {
		t.Fatal(err)
	}
	body := []byte("old body")
	if _, err := conn.Exec(ctx, `INSERT INTO `+q+`.fencecron_keys VALUES ('reports/old.csv', 1, 4, 2, 4, 2, 'w4', $1, $2, $3, $4, 0, 1)`,
		fencedstore.Hash(body), len(body), old, body); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+q+`.fencecron_history VALUES ('reports/old.csv', 0, 'applied', 4, 2, 'w4', 1, 0, 0, $1, $2, NULL)`,
		fencedstore.Hash(body), old); err != nil {
		t.Fatal(err)
	}

	clock := storetest.NewClock(old.Add(48 * time.Hour))
	st := open(t, url, schema, storetest.Options{Now: clock.Now})
	obj, err := st.Get(ctx, "reports/old.csv")
	if err != nil || string(obj.Body) != string(body) || obj.Version != 1 || obj.Greatest != storetest.T(4, 2) {
		t.Fatalf("the old key after migration: %+v %q, %v", obj.Meta, obj.Body, err)
	}
	if h, err := st.History(ctx, "reports/old.csv"); err != nil || len(h) != 1 || h[0].Outcome != fencedstore.Applied {
		t.Fatalf("the old history after migration: %+v, %v", h, err)
	}
	if _, err := st.Publish(ctx, fencedstore.PublishRequest{Key: "reports/old.csv", Token: storetest.T(4, 1), Attempt: "w3", Body: []byte("stale")}); !errors.Is(err, fencedstore.ErrStaleOwner) {
		t.Fatalf("an older token after migration: err = %v, want stale_owner", err)
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT max(version) FROM `+q+`.fencecron_schema`).Scan(&version); err != nil || version != postgres.SchemaVersion {
		t.Fatalf("schema version = %d (%v), want %d", version, err, postgres.SchemaVersion)
	}
	var comments, indexes int
	conn.QueryRow(ctx, `SELECT count(*) FROM pg_description d JOIN pg_class c ON c.oid = d.objoid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1`, schema).Scan(&comments)
	conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname IN ('fencecron_keys_touched', 'fencecron_keys_deleted', 'fencecron_history_at')`, schema).Scan(&indexes)
	if comments < 20 || indexes != 3 {
		t.Errorf("after migration: %d comments, %d of the 3 indexes", comments, indexes)
	}
	// The key's age is its old update time: a one-day rule deletes it.
	sw, err := st.SweepRule(ctx, fencedstore.RetentionRule{Prefix: "reports/", MaxAge: 24 * time.Hour}, clock.Now(), 10)
	if err != nil || len(sw.ByAge) != 1 {
		t.Fatalf("sweep after migration: %+v, %v; want the old key deleted", sw, err)
	}
	// Opening again changes nothing.
	st.Close()
	open(t, url, schema, storetest.Options{})
	var rows int
	conn.QueryRow(ctx, `SELECT count(*) FROM `+q+`.fencecron_schema`).Scan(&rows)
	if rows != postgres.SchemaVersion {
		t.Errorf("fencecron_schema has %d rows after a second open, want %d", rows, postgres.SchemaVersion)
	}
}

// A schema a newer fencecron migrated is refused, not written to.
func TestStore_RefusesNewerSchema(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	ctx := context.Background()
	open(t, url, schema, storetest.Options{}).Close()
	conn := connect(t, url)
	if _, err := conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema}.Sanitize()+`.fencecron_schema (version) VALUES ($1)`, postgres.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	s := postgres.New(url)
	s.Schema = schema
	err := s.Open()
	if err == nil {
		s.Close()
		t.Fatal("opened a schema from a newer fencecron")
	}
	if !strings.Contains(err.Error(), "upgrade fencecron") {
		t.Errorf("err = %v; want it to say to upgrade", err)
	}
}

func BenchmarkSweep20k(b *testing.B) {
	storetest.BenchSweep(b, func() fencedstore.Store { return newBenchStore(b) }, 20_000)
}

func BenchmarkListPage100k(b *testing.B) { storetest.BenchListPage(b, newBenchStore(b), 100_000) }

// Nodes sharing one database sweep the same rule at once: together they
// delete exactly the excess, not the excess each counted.
func TestStore_ConcurrentSweepsTrimExactly(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	a := open(t, url, schema, storetest.Options{})
	b := open(t, url, schema, storetest.Options{})
	ctx := context.Background()
	for i := 1; i <= 40; i++ {
		if _, err := a.Publish(ctx, fencedstore.PublishRequest{Key: fmt.Sprintf("r/%02d", i), Token: storetest.T(1, uint64(i)), Attempt: "a", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	rule := fencedstore.RetentionRule{Prefix: "r/", MaxKeys: 10}
	var wg sync.WaitGroup
	for _, s := range []*postgres.Store{a, b} {
		wg.Go(func() {
			for range 100 {
				sw, err := s.SweepRule(ctx, rule, time.Now(), 3)
				if err != nil {
					t.Error(err)
					return
				}
				if !sw.More {
					return
				}
			}
		})
	}
	wg.Wait()
	metas, err := a.List(ctx, "r/")
	if err != nil || len(metas) != 10 || metas[0].Key != "r/31" {
		t.Fatalf("after two concurrent sweeps: %d keys from %v (%v); want the newest 10, r/31 to r/40", len(metas), metas[0].Key, err)
	}
}

// connect opens a connection to the test database for a test to write
// into a schema as an older fencecron would have; it is closed at cleanup.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

// A floor raised while a call of its job is deciding on another node
// (read the floor, then waiting for the key's row) takes effect after
// that call: RaiseFloor waits for it, so nothing revoked is written once
// the raise has returned. The key's row is held by a transaction of the
// test, so the call waits there for as long as the test says.
func TestStore_RaiseFloorWaitsForCallsInFlight(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	a := open(t, url, schema, storetest.Options{})
	b := open(t, url, schema, storetest.Options{}) // another node on the same database
	ctx := context.Background()
	const key, job = "reports/x.csv", "report"
	if _, err := a.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: storetest.T(1, 1), Attempt: "a", Job: job, Body: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	// Hold the key's row.
	holder := connect(t, url)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema, "fencecron_keys"}.Sanitize()+` WHERE key = $1 FOR UPDATE`, key); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() {
		_, err := a.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: storetest.T(1, 2), Attempt: "a", Job: job, Body: []byte("two")})
		published <- err
	}()
	watch := connect(t, url)
	waitFor(t, "the publish waiting for the key's row", func() (bool, error) {
		var n int
		err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, schema).Scan(&n)
		return n > 0, err
	})
	raised := make(chan error, 1)
	go func() {
		_, err := b.RaiseFloor(ctx, job, storetest.T(1, 5))
		raised <- err
	}()
	waitFor(t, "the raise waiting for the publish, or returning", func() (bool, error) {
		select {
		case err := <-raised:
			t.Fatalf("RaiseFloor returned (%v) while a call of its job was still deciding: the call lands after the raise", err)
		default:
		}
		var n int
		err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND objid::bigint = (hashtext($1)::bigint & 4294967295)`, schema+"/"+job).Scan(&n)
		return n > 0, err
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatalf("the publish that began before the raise: %v", err)
	}
	if err := <-raised; err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(ctx, fencedstore.PublishRequest{Key: key, Token: storetest.T(1, 3), Attempt: "a", Job: job, Body: []byte("three")}); !errors.Is(err, fencedstore.ErrStaleOwner) {
		t.Errorf("a publish after the raise: err = %v, want stale_owner", err)
	}
}

// waitFor polls cond until it holds, for at most 20 s.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package web

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

// manyKeys is a store of n keys made up on demand ("reports/0000000" on),
// that lists only by pages: a full List fails the test.
type manyKeys struct {
	fakeStore
	t testing.TB
	n int
}

func (s manyKeys) key(i int) string { return fmt.Sprintf("reports/%07d.csv", i) }

func (s manyKeys) List(context.Context, string) ([]fencedstore.Meta, error) {
	s.t.Error("the Store page listed every key")
	return nil, fencedstore.ErrUnavailable
}

func (s manyKeys) ListPage(_ context.Context, prefix, after string, limit int) (fencedstore.Page, error) {
	i := sort.Search(s.n, func(i int) bool { return s.key(i) > after && s.key(i) >= prefix })
	var page fencedstore.Page
	for ; i < s.n && strings.HasPrefix(s.key(i), prefix); i++ {
		if len(page.Keys) == limit {
			page.Next = page.Keys[limit-1].Key
			break
		}
		page.Keys = append(page.Keys, fencedstore.Meta{Key: s.key(i), Version: 1, Greatest: fencedstore.Token{Epoch: 1, Seq: uint64(i + 1)}})
	}
	return page, nil
}

// The Store page reads one bounded page, whatever the store holds, and
// links to the next with the API's cursor; a prefix narrows it.
func TestStorePage_PagedAndBounded(t *testing.T) {
	const n = 100_000
	f := newFixture(t, func(s *Server) { s.Store = manyKeys{t: t, n: n} })
	start := time.Now()
	code, _, body := f.get(t, "/store")
	took := time.Since(start)
	if code != 200 {
		t.Fatalf("GET /store = %d", code)
	}
	if got := strings.Count(body, `<tr class="key"`); got != storePageKeys {
		t.Errorf("the page shows %d keys, want %d", got, storePageKeys)
	}
	t.Logf("Store page over %d keys: %d bytes in %s", n, len(body), took)
	next := fencedstore.EncodeCursor("", "reports/0000099.csv")
	if !strings.Contains(body, `href="/store?cursor=`+next+`">next page</a>`) {
		t.Fatalf("no link to the next page with cursor %s", next)
	}
	_, _, body = f.get(t, "/store?cursor="+next)
	if !strings.Contains(body, `data-key="reports/0000100.csv"`) || strings.Contains(body, `data-key="reports/0000099.csv"`) || !strings.Contains(body, `first page</a>`) {
		t.Error("the second page does not start after the first")
	}
	_, _, body = f.get(t, "/store?prefix=reports/00999")
	if got := strings.Count(body, `<tr class="key"`); got != 100 || !strings.Contains(body, `data-key="reports/0099999.csv"`) || strings.Contains(body, "next page") {
		t.Errorf("prefix reports/00999: %d keys shown, want the last 100 and no next page", got)
	}
	if code, _, _ := f.get(t, "/store?prefix=reports/&cursor="+next); code != 400 {
		t.Errorf("a cursor of another prefix: %d, want 400", code)
	}
}

// A key retention deleted shows its deletion and the refusals of its old
// owner on its page.
func TestKeyPage_DeletedKey(t *testing.T) {
	s := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	g := fencedstore.Token{Epoch: 3, Seq: 7}
	if _, err := s.Publish(ctx, fencedstore.PublishRequest{Key: "reports/old.csv", Token: g, Attempt: "w3", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SweepRule(ctx, fencedstore.RetentionRule{Prefix: "reports/", MaxKeys: 1}, time.Now(), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SweepRule(ctx, fencedstore.RetentionRule{Prefix: "reports/", MaxAge: time.Nanosecond}, time.Now().Add(time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	s.Publish(ctx, fencedstore.PublishRequest{Key: "reports/old.csv", Token: g, Attempt: "w3", Body: []byte("x")})
	f := newFixture(t, func(srv *Server) { srv.Store = s })
	code, _, body := f.get(t, "/store/reports/old.csv")
	for _, want := range []string{`by retention; the tombstone keeps 3.7`, `refused: 3.7 is not newer than the tombstone's`, `No body published yet.`} {
		if !strings.Contains(body, want) {
			t.Errorf("key page (%d) lacks %q:\n%s", code, want, body)
		}
	}
	if _, _, list := f.get(t, "/store"); strings.Contains(list, "reports/old.csv") {
		t.Error("the Store page lists a deleted key")
	}
}

// A key's page links to its earlier versions.
func TestKeyPage_LinksEarlierVersions(t *testing.T) {
	s := bolt.New(filepath.Join(t.TempDir(), "store.db"))
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := uint64(1); i <= 3; i++ {
		if _, err := s.Publish(context.Background(), fencedstore.PublishRequest{Key: "reports/a.csv", Token: fencedstore.Token{Epoch: 1, Seq: i}, Attempt: "a", Body: []byte{byte('0' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	f := newFixture(t, func(srv *Server) { srv.Store = s })
	_, _, body := f.get(t, "/store/reports/a.csv")
	if !strings.Contains(body, `<a href="/api/v1/store/reports/a.csv?version=2">v2</a> <a href="/api/v1/store/reports/a.csv?version=1">v1</a>`) {
		t.Errorf("no links to v2 and v1:\n%s", body)
	}
}

// BenchmarkStorePage100k renders the Store page over a bolt store of
// 100,000 keys: one page, whatever the store holds.
func BenchmarkStorePage100k(b *testing.B) {
	s := bolt.New(filepath.Join(b.TempDir(), "store.db"))
	if err := s.Open(); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchFill(b, s, 100_000)
	f := newFixture(b, func(srv *Server) { srv.Store = s })
	b.ResetTimer()
	size := 0
	for b.Loop() {
		code, _, body := f.get(b, "/store?prefix=bench/")
		if code != 200 {
			b.Fatalf("GET /store = %d", code)
		}
		size = len(body)
	}
	b.ReportMetric(float64(size), "bytes/page")
}

// storePageKeys is web/pages': the keys one Store page shows.
const storePageKeys = 100

package history

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func run(job string, sec int, st jobs.State) jobs.Run {
	at := t0.Add(time.Duration(sec) * time.Second)
	return jobs.Run{ID: jobs.RunID(job, at), Job: job, ScheduledAt: at, State: st}
}

// MustOpen opens a store in a temporary directory on a fake clock at t0,
// closed when the test ends.
func MustOpen(t testing.TB, def jobs.History, path string, set ...func(*Store)) (*Store, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(t0.Add(time.Hour))
	if path == "" {
		path = filepath.Join(t.TempDir(), "history.db")
	}
	// The loops wait on the fake clock: tests sweep and flush themselves.
	year := 365 * 24 * time.Hour
	s := &Store{Path: path, Default: def, Clock: clk, SweepEvery: year, FlushEvery: year, FillEvery: year}
	for _, f := range set {
		f(s)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, clk
}

func ids(runs []jobs.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

func TestGaps(t *testing.T) {
	g := AddGap(nil, Range{From: 10, To: 20})
	g = AddGap(g, Range{From: 30, To: 40})
	g = AddGap(g, Range{From: 20, To: 25})
	if got, want := fmt.Sprint(g), "[(10, 25] (30, 40]]"; got != want {
		t.Fatalf("gaps %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(RemoveGap(g, Range{From: 12, To: 35})), "[(10, 12] (35, 40]]"; got != want {
		t.Fatalf("after removal %s, want %s", got, want)
	}
	for _, c := range []struct {
		through uint64
		r       Range
		want    string
	}{
		{50, Range{From: 0, To: 10}, "[(0, 10]]"},
		{50, Range{From: 0, To: 11}, "[(0, 10]]"},
		{50, Range{From: 12, To: 20}, "[]"},
		{50, Range{From: 0, To: 60}, "[(0, 10] (25, 30] (40, 50]]"},
		{20, Range{From: 40, To: 51}, "[]"},
	} {
		if got := fmt.Sprint(Covered(c.through, g, c.r)); got != c.want {
			t.Errorf("Covered(%d, %v, %v) = %s, want %s", c.through, g, c.r, got, c.want)
		}
	}
}

func TestKeep(t *testing.T) {
	h := jobs.History{Runs: 3, MaxAge: jobs.Duration(time.Hour)}
	now := t0
	times := []time.Time{now, now.Add(-time.Minute), now.Add(-30 * time.Minute), now.Add(-40 * time.Minute)}
	if got, want := Keep(times, h, now), 3; got != want {
		t.Errorf("Keep by count = %d, want %d", got, want)
	}
	times[2] = now.Add(-2 * time.Hour)
	if got, want := Keep(times[:3], h, now), 2; got != want {
		t.Errorf("Keep by age = %d, want %d", got, want)
	}
}

func TestStore_RetentionByCountIsOrderFree(t *testing.T) {
	h := jobs.History{Runs: 3, MaxAge: jobs.Duration(30 * 24 * time.Hour)}
	// The same runs archived in two orders (a server's own trim, and a
	// gap filling that comes later with older ones) keep the same newest 3.
	var lists [][]string
	for _, order := range [][]int{{1, 2, 3, 4, 5, 6}, {6, 5, 4, 3, 2, 1}, {3, 6, 1, 5, 2, 4}} {
		s, _ := MustOpen(t, h, "")
		for i, sec := range order {
			s.Archive(uint64(i+1), []jobs.Run{run("a", sec, jobs.Succeeded)}, nil)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		page, err := s.ListRuns(nil, RunQuery{Job: "a"})
		if err != nil {
			t.Fatal(err)
		}
		lists = append(lists, ids(page.Runs))
	}
	want := []string{run("a", 6, "").ID, run("a", 5, "").ID, run("a", 4, "").ID}
	for i, l := range lists {
		if !slices.Equal(l, want) {
			t.Errorf("order %d kept %v, want %v", i, l, want)
		}
	}
}

func TestStore_ReplayIsIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	s, _ := MustOpen(t, jobs.History{}, path)
	for i := range 10 {
		s.Archive(uint64(i+1), []jobs.Run{run("a", i, jobs.Failed)}, []jobs.Event{{Seq: uint64(i + 1), Time: t0, Kind: "granted", Job: "a"}})
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, _ = MustOpen(t, jobs.History{}, path)
	if through, gaps := s.Coverage(); through != 10 || len(gaps) != 0 {
		t.Fatalf("coverage after reopening: %d %v, want 10 and no gaps", through, gaps)
	}
	// Raft replays the entries after the snapshot: the same records
	// again, here twice in one commit, and an event never stored between
	// the replayed ones.
	for range 2 {
		for i := 5; i < 10; i++ {
			s.Archive(uint64(i+1), []jobs.Run{run("a", i, jobs.Failed)}, []jobs.Event{{Seq: uint64(i + 1), Time: t0, Kind: "granted", Job: "a"}})
		}
	}
	s.Archive(11, nil, []jobs.Event{{Seq: 11, Time: t0, Kind: "granted", Job: "a"}})
	s.Archive(11, nil, []jobs.Event{{Seq: 11, Time: t0, Kind: "granted", Job: "a"}})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListRuns(nil, RunQuery{Job: "a", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(page.Runs), 10; got != want {
		t.Fatalf("%d runs after replay, want %d", got, want)
	}
	evs, err := s.ListEvents(nil, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(evs.Events), 11; got != want {
		t.Fatalf("%d events after replay, want %d", got, want)
	}
	// What retention counts must agree, or it trims too early or never.
	err = s.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucketCounts).Get([]byte("a")); beUint64(v) != 10 {
			t.Errorf("job a counted %d runs, want 10", beUint64(v))
		}
		if v := tx.Bucket(bucketMeta).Get(metaEvents); beUint64(v) != 11 {
			t.Errorf("%d events counted, want 11", beUint64(v))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStore_RetentionByAge(t *testing.T) {
	h := jobs.History{Runs: 100, MaxAge: jobs.Duration(2 * time.Hour)}
	s, clk := MustOpen(t, h, "")
	// now is t0+1h: a run scheduled 2h before that is dropped on insert.
	s.Archive(1, []jobs.Run{run("a", -2*3600, jobs.Succeeded), run("a", 0, jobs.Succeeded), run("a", 1800, jobs.Succeeded)}, nil)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	page, _ := s.ListRuns(nil, RunQuery{Job: "a"})
	if got, want := ids(page.Runs), []string{run("a", 1800, "").ID, run("a", 0, "").ID}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	clk.Advance(90 * time.Minute) // now t0+2h30m: the run at t0 is past 2h
	page, _ = s.ListRuns(nil, RunQuery{Job: "a"})
	if got, want := ids(page.Runs), []string{run("a", 1800, "").ID}; !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v (an expired run is not listed before the sweep)", got, want)
	}
	n, err := s.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("sweep deleted %d, want 1", n)
	}
}

func TestStore_ListRunsMergesAndPages(t *testing.T) {
	s, _ := MustOpen(t, jobs.History{Runs: 1000}, "")
	var stored []jobs.Run
	for i := range 25 {
		stored = append(stored, run("a", i, jobs.Succeeded), run("b", i, jobs.Failed))
	}
	s.Archive(1, stored, nil)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// The hot window holds newer runs, and one already stored (a trim
	// and a read crossing).
	hot := []jobs.Run{run("a", 30, jobs.Running), run("a", 31, jobs.Succeeded), run("b", 30, jobs.Succeeded), run("a", 24, jobs.Succeeded)}
	for _, q := range []RunQuery{{Job: "a", Limit: 4}, {Limit: 7}, {Job: "b", States: []jobs.State{jobs.Failed}, Limit: 3}} {
		var all []string
		cursor := ""
		for range 100 {
			q.Cursor = cursor
			page, err := s.ListRuns(slices.Clone(hot), q)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Runs) > q.Limit {
				t.Fatalf("%+v: page of %d", q, len(page.Runs))
			}
			all = append(all, ids(page.Runs)...)
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		var want []jobs.Run
		for _, r := range append(slices.Clone(stored), hot[:3]...) {
			if q.match(r) {
				want = append(want, r)
			}
		}
		slices.SortFunc(want, newer)
		if !slices.Equal(all, ids(want)) {
			t.Errorf("%+v: listed %v\nwant %v", q, all, ids(want))
		}
	}
	// Runs of several jobs at one time, one a page: each once, whether a
	// page ends in the file or in the hot window.
	s2, _ := MustOpen(t, jobs.History{}, "")
	s2.Archive(1, []jobs.Run{run("a", 100, jobs.Succeeded), run("a-b", 100, jobs.Succeeded), run("a-c", 100, jobs.Failed), run("b", 99, jobs.Succeeded)}, nil)
	if err := s2.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	cursor := ""
	for range 20 {
		page, err := s2.ListRuns([]jobs.Run{run("ab", 100, jobs.Running)}, RunQuery{Limit: 1, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(page.Runs)...)
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if want := []string{run("ab", 100, "").ID, run("a-c", 100, "").ID, run("a-b", 100, "").ID, run("a", 100, "").ID, run("b", 99, "").ID}; !slices.Equal(got, want) {
		t.Errorf("runs at one time, a page each: %v, want %v", got, want)
	}
	if _, err := s.ListRuns(nil, RunQuery{Cursor: "nonsense!"}); !errors.Is(err, ErrBadCursor) {
		t.Errorf("bad cursor: %v", err)
	}
}

func TestStore_RestoreRecordsGapAndFillsIt(t *testing.T) {
	peer, _ := MustOpen(t, jobs.History{}, "")
	for i := range 1200 { // more than two pages
		peer.Archive(uint64(i+1), []jobs.Run{run("a", i, jobs.Succeeded)}, []jobs.Event{{Seq: uint64(i + 1), Time: t0, Kind: "completed"}})
	}
	if err := peer.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Range(RangeRequest{Range: Range{From: 1200, To: 1300}}); !errors.Is(err, ErrNotCovered) {
		t.Fatalf("a range beyond the peer's history: %v, want ErrNotCovered", err)
	}
	// A peer that itself installed a snapshot at 500 covers only what
	// came after.
	partial, _ := MustOpen(t, jobs.History{}, "")
	if err := partial.Restored(500); err != nil {
		t.Fatal(err)
	}
	for i := 500; i < 1200; i++ {
		partial.Archive(uint64(i+1), []jobs.Run{run("a", i, jobs.Succeeded)}, []jobs.Event{{Seq: uint64(i + 1), Time: t0, Kind: "completed"}})
	}
	if err := partial.Sync(); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "h.db")
	s, _ := MustOpen(t, jobs.History{}, path)
	// Installing a snapshot of index 1000 skips all that came before.
	if err := s.Restored(1000); err != nil {
		t.Fatal(err)
	}
	if through, gaps := s.Coverage(); through != 1000 || fmt.Sprint(gaps) != "[(0, 1000]]" {
		t.Fatalf("coverage %d %v, want 1000 [(0, 1000]]", through, gaps)
	}
	// What it then applies itself.
	for i := 1000; i < 1200; i++ {
		s.Archive(uint64(i+1), []jobs.Run{run("a", i, jobs.Succeeded)}, []jobs.Event{{Seq: uint64(i + 1), Time: t0, Kind: "completed"}})
	}
	if _, err := s.Range(RangeRequest{Range: Range{From: 10, To: 20}}); !errors.Is(err, ErrNotCovered) {
		t.Fatalf("a range in the server's own gap: %v, want ErrNotCovered", err)
	}
	// The gap survives a restart.
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	peers := []string{"partial"}
	s, _ = MustOpen(t, jobs.History{}, path, func(s *Store) {
		s.Peers = func() []string { return peers }
		s.Fetch = func(_ context.Context, name string, req RangeRequest) (RangePage, error) {
			if name == "partial" {
				return partial.Range(req)
			}
			return peer.Range(req)
		}
	})
	if _, gaps := s.Coverage(); len(gaps) != 1 {
		t.Fatalf("gaps after restart: %v", gaps)
	}
	if err := s.FillGap(context.Background(), Range{From: 0, To: 1000}); err == nil {
		t.Fatal("filling from a peer that covers half the gap: nil error")
	}
	if _, gaps := s.Coverage(); fmt.Sprint(gaps) != "[(0, 500]]" {
		t.Fatalf("gaps after a partial fill: %v, want [(0, 500]]", gaps)
	}
	peers = []string{"partial", "peer"}
	if err := s.FillGap(context.Background(), Range{From: 0, To: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, gaps := s.Coverage(); len(gaps) != 0 {
		t.Fatalf("gaps after the fill: %v", gaps)
	}
	for _, st := range []*Store{peer, s} {
		page, err := st.ListRuns(nil, RunQuery{Job: "a", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(page.Runs), 100; got != want { // the default history.runs
			t.Fatalf("%d runs, want %d", got, want)
		}
		if got, want := page.Runs[99].ID, run("a", 1100, "").ID; got != want {
			t.Fatalf("oldest kept %s, want %s", got, want)
		}
	}
	a, _ := peer.ListEvents(nil, EventQuery{Limit: 5000})
	b, _ := s.ListEvents(nil, EventQuery{Limit: 5000})
	if len(a.Events) != 1200 || len(b.Events) != 1200 {
		t.Fatalf("events: peer %d, filled %d; want 1200 each", len(a.Events), len(b.Events))
	}
}

// A sweep visits a bounded number of records; sweeps one after the other
// apply a lowered history.runs, and max_age, to every job.
func TestStore_SweepIsBoundedAndConverges(t *testing.T) {
	keep := 10
	s, clk := MustOpen(t, jobs.History{}, "", func(s *Store) {
		s.SweepBudget = 7
		s.Retention = func(string) jobs.History { return jobs.History{Runs: keep, MaxAge: jobs.Duration(2 * time.Hour)} }
	})
	var runs []jobs.Run
	for _, job := range []string{"a", "b", "c", "d"} {
		for i := range 10 {
			runs = append(runs, run(job, i*60, jobs.Succeeded))
		}
	}
	s.Archive(1, runs, nil)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	sweepAll := func() int {
		total := 0
		for range 100 {
			n, err := s.Sweep()
			if err != nil {
				t.Fatal(err)
			}
			if n > 7 {
				t.Fatalf("one sweep deleted %d, more than its budget", n)
			}
			total += n
			if n == 0 {
				// Nothing this time: a whole cycle later, nothing still.
				quiet := true
				for range 10 {
					if n, _ := s.Sweep(); n != 0 {
						quiet, total = false, total+n
					}
				}
				if quiet {
					return total
				}
			}
		}
		t.Fatal("sweeps never converged")
		return 0
	}
	keep = 2
	if got, want := sweepAll(), 4*8; got != want {
		t.Errorf("sweeps deleted %d after history.runs went down to 2, want %d", got, want)
	}
	for _, job := range []string{"a", "b", "c", "d"} {
		page, _ := s.ListRuns(nil, RunQuery{Job: job})
		if got, want := ids(page.Runs), []string{run(job, 540, "").ID, run(job, 480, "").ID}; !slices.Equal(got, want) {
			t.Errorf("%s keeps %v, want %v", job, got, want)
		}
	}
	clk.Advance(2 * time.Hour) // now t0+3h: every run is past 2h
	if got, want := sweepAll(), 4*2; got != want {
		t.Errorf("sweeps deleted %d past max_age, want %d", got, want)
	}
}

// A record's index is read the same way whether or not it takes the fast
// path, and a record that is not one is an error, not index 0.
func TestRecordIndex(t *testing.T) {
	r := run("nightly", 3, jobs.Succeeded)
	r.Reason = `a "quoted", comma`
	for _, tc := range []struct {
		v    []byte
		want uint64
	}{
		{marshal(runRecord{Index: 18446744073709551615, Run: r}), 18446744073709551615},
		{marshal(eventRecord{Index: 42, Event: jobs.Event{Seq: 7, Kind: jobs.EventGranted, Detail: "x,y"}}), 42},
		{[]byte(`{"run":{"id":"a"},"index":9}`), 9},
		{[]byte(`{"index":12}`), 12},
		{[]byte(`{ "index": 13, "run": {} }`), 13},
	} {
		got, err := recordIndex(tc.v)
		if err != nil || got != tc.want {
			t.Errorf("recordIndex(%s) = %d, %v; want %d", tc.v, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `{"index":`, `{"index":-1,"run":{}}`, `not json`} {
		if got, err := recordIndex([]byte(bad)); err == nil {
			t.Errorf("recordIndex(%q) = %d, want an error", bad, got)
		}
	}
}

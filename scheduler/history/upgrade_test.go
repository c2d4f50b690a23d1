package history

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/clocktest"
)

// legacyFile is a history written by the version before runs were
// compressed (commit 7eb1b92, every run stored as JSON), by
// TestWriteLegacyFile run in a checkout of that commit.
const legacyFile = "testdata/history-json.db"

// legacyRuns are the runs legacyFile holds: two jobs, four runs each,
// archived one entry each from index 1.
func legacyRuns() []jobs.Run {
	rng := rand.New(rand.NewPCG(32, 5))
	var runs []jobs.Run
	for i := range 4 {
		for _, job := range []string{"backup", "report"} {
			runs = append(runs, realisticRun(rng, job, t0.Add(time.Duration(i)*time.Minute), uint64(len(runs))))
		}
	}
	return runs
}

// legacyEvents are the events legacyFile holds, archived by entry 1.
func legacyEvents() []jobs.Event {
	tok := jobs.Fence{Epoch: 41, Seq: 3}
	return []jobs.Event{
		{Seq: 1, Index: 1, Time: t0, Kind: jobs.EventGranted, Node: "worker-1", Job: "backup", Run: jobs.RunID("backup", t0), Token: &tok},
		{Seq: 2, Index: 1, Time: t0.Add(time.Second), Kind: jobs.EventCompleted, Node: "worker-1", Job: "backup", Run: jobs.RunID("backup", t0), Detail: "succeeded"},
	}
}

// TestWriteLegacyFile writes legacyFile when FENCECRON_WRITE_LEGACY names
// the path; it is how the fixture was made with the old code, and is
// skipped otherwise.
func TestWriteLegacyFile(t *testing.T) {
	path := os.Getenv("FENCECRON_WRITE_LEGACY")
	if path == "" {
		t.Skip("FENCECRON_WRITE_LEGACY not set")
	}
	s, _ := MustOpen(t, jobs.History{Runs: 10}, path)
	for i, r := range legacyRuns() {
		var evs []jobs.Event
		if i == 0 {
			evs = legacyEvents()
		}
		s.Archive(uint64(i+1), []jobs.Run{r}, evs)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// openLegacy opens a copy of legacyFile, keeping keep runs a job.
func openLegacy(t *testing.T, keep int) (*Store, *clocktest.Clock) {
	t.Helper()
	src, err := os.Open(legacyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "history.db")
	dst, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return MustOpen(t, jobs.History{Runs: keep}, path)
}

// asJSONRead returns v as the history read it before: through JSON.
func asJSONRead[T any](t *testing.T, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// formats returns the first byte of each stored run, by run id.
func formats(t *testing.T, s *Store) map[string]byte {
	t.Helper()
	out := map[string]byte{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRuns).ForEach(func(k, v []byte) error {
			job, at, _ := splitRunKey(k)
			out[jobs.RunID(job, at)] = v[0]
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustList(t *testing.T, s *Store, q RunQuery) []jobs.Run {
	t.Helper()
	p, err := s.ListRuns(nil, q)
	if err != nil {
		t.Fatal(err)
	}
	return p.Runs
}

// A history written before the upgrade reads after it as it read before
// it: every run and event, the coverage, and a gap filling's answer.
func TestStore_ReadsHistoryWrittenAsJSON(t *testing.T) {
	s, _ := openLegacy(t, 10)
	want := asJSONRead(t, legacyRuns())
	for id, f := range formats(t, s) {
		if f != formatJSON {
			t.Fatalf("fixture run %s stored as %#x, want JSON: the fixture is not the old format", id, f)
		}
	}
	if got, wantN := len(formats(t, s)), len(want); got != wantN {
		t.Fatalf("fixture holds %d runs, want %d", got, wantN)
	}
	slices.SortFunc(want, newer)
	if got := mustList(t, s, RunQuery{}); !reflect.DeepEqual(got, want) {
		t.Errorf("runs read back differ:\n got %+v\nwant %+v", got, want)
	}
	var backup []jobs.Run
	for _, r := range want {
		if r.Job == "backup" {
			backup = append(backup, r)
		}
	}
	if got := mustList(t, s, RunQuery{Job: "backup"}); !reflect.DeepEqual(got, backup) {
		t.Errorf("one job's runs read back differ:\n got %+v\nwant %+v", got, backup)
	}
	evs, err := s.ListEvents(nil, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := evs.Events, asJSONRead(t, legacyEvents()); !reflect.DeepEqual(got, want) {
		t.Errorf("events read back differ:\n got %+v\nwant %+v", got, want)
	}
	if through, gaps := s.Coverage(); through != 8 || len(gaps) != 0 {
		t.Errorf("coverage through %d gaps %v, want 8 and none", through, gaps)
	}
	page, err := s.Range(RangeRequest{Range: Range{From: 0, To: 8}})
	if err != nil {
		t.Fatal(err)
	}
	for i, rr := range page.Runs {
		if rr.Index != uint64(i+1) || !reflect.DeepEqual(rr.Run, asJSONRead(t, legacyRuns()[i])) {
			t.Errorf("range run %d: index %d, run %s; want index %d, run %s", i, rr.Index, rr.Run.ID, i+1, legacyRuns()[i].ID)
		}
	}
	if got, want := len(page.Runs), 8; got != want {
		t.Errorf("range has %d runs, want %d", got, want)
	}
}

// Runs stored before the upgrade and after it list together, in order;
// retention deletes either kind; a history holding both answers a gap
// filling, through the wire's JSON, with every run as it was archived.
func TestStore_ListsOldAndNewRecordsTogether(t *testing.T) {
	s, clk := openLegacy(t, 5)
	rng := rand.New(rand.NewPCG(9, 9))
	all, allEvents := legacyRuns(), legacyEvents()
	idx := uint64(8)
	for i := 4; i < 6; i++ {
		for _, job := range []string{"backup", "report"} {
			r := realisticRun(rng, job, t0.Add(time.Duration(i)*time.Minute), idx)
			idx++
			ev := jobs.Event{Seq: uint64(len(allEvents) + 1), Index: idx, Time: r.ScheduledAt, Kind: jobs.EventGranted, Node: "worker-2",
				Job: job, Run: r.ID, Attempt: jobs.AttemptID(r.ID, 1), Token: &jobs.Fence{Epoch: 42, Seq: idx}, Detail: "granted"}
			s.Archive(idx, []jobs.Run{r}, []jobs.Event{ev})
			all, allEvents = append(all, r), append(allEvents, ev)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}

	// Five kept a job: the two new ones (compressed) and three old ones
	// (JSON); the oldest JSON one of each job was deleted on insert.
	want := asJSONRead(t, all[2:])
	slices.SortFunc(want, newer)
	fs := formats(t, s)
	if got := len(fs); got != 10 {
		t.Fatalf("%d runs stored, want 10", got)
	}
	for i, r := range all[2:] {
		wantF := formatJSON
		if i >= 6 {
			wantF = formatRunV1
		}
		if fs[r.ID] != wantF {
			t.Errorf("run %s stored as %#x, want %#x", r.ID, fs[r.ID], wantF)
		}
	}
	if got := mustList(t, s, RunQuery{}); !reflect.DeepEqual(got, want) {
		t.Errorf("mixed runs read back differ:\n got %v\nwant %v", ids(got), ids(want))
	}
	evFormats := map[byte]int{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketEvents).ForEach(func(_, v []byte) error { evFormats[v[0]]++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if evFormats[formatJSON] != 2 || evFormats[formatEventV1] != 4 {
		t.Errorf("events stored by format: %v, want the fixture's 2 as JSON and the 4 new ones as %#x", evFormats, formatEventV1)
	}
	wantEvents := asJSONRead(t, allEvents)
	if got := mustEvents(t, s); !reflect.DeepEqual(got, wantEvents) {
		t.Errorf("mixed events read back differ:\n got %+v\nwant %+v", got, wantEvents)
	}
	// Paged one job at a time, across the change of format.
	var paged []jobs.Run
	q := RunQuery{Job: "report", Limit: 2}
	for range 10 {
		p, err := s.ListRuns(nil, q)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, p.Runs...)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	wantReport := slices.DeleteFunc(slices.Clone(want), func(r jobs.Run) bool { return r.Job != "report" })
	if !reflect.DeepEqual(paged, wantReport) {
		t.Errorf("paged runs differ:\n got %v\nwant %v", ids(paged), ids(wantReport))
	}

	// A new server with the whole range as a gap fills it from this one.
	peer, _ := MustOpen(t, jobs.History{Runs: 5}, "", func(p *Store) {
		p.Peers = func() []string { return []string{"old-and-new"} }
		p.Fetch = func(_ context.Context, _ string, req RangeRequest) (RangePage, error) {
			page, err := s.Range(req)
			return asJSONRead(t, page), err
		}
	})
	if err := peer.Restored(idx); err != nil {
		t.Fatal(err)
	}
	if err := peer.FillGap(context.Background(), Range{From: 0, To: idx}); err != nil {
		t.Fatal(err)
	}
	if got := mustList(t, peer, RunQuery{}); !reflect.DeepEqual(got, want) {
		t.Errorf("gap-filled runs differ:\n got %v\nwant %v", ids(got), ids(want))
	}
	if got := mustEvents(t, peer); !reflect.DeepEqual(got, wantEvents) {
		t.Errorf("gap-filled events differ:\n got %+v\nwant %+v", got, wantEvents)
	}

	// Retention by age deletes both kinds.
	clk.Advance(31 * 24 * time.Hour)
	n, err := s.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(formats(t, s)); n < 10 || got != 0 {
		t.Errorf("sweep past max_age deleted %d records and left %d runs, want every run gone", n, got)
	}
	if got := mustEvents(t, s); len(got) != 0 {
		t.Errorf("sweep past max_age left %d events, want none", len(got))
	}
}

func mustEvents(t *testing.T, s *Store) []jobs.Event {
	t.Helper()
	p, err := s.ListEvents(nil, EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Events
}

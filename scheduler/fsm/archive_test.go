package fsm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/history"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// entry is a raw log entry of this binary's format, as the leader writes
// them (only the fields the FSM reads).
func entry(t *testing.T, index uint64, v map[string]any) *raft.Log {
	t.Helper()
	v["v"] = replicated.LogVersion
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Term: 2, Index: index, Type: raft.LogCommand, Data: b}
}

type snapSink struct{ bytes.Buffer }

func (s *snapSink) ID() string    { return "mem" }
func (s *snapSink) Cancel() error { return nil }
func (s *snapSink) Close() error  { return nil }

// An FSM with a history: what trim lets go of is listed from the history
// after a snapshot, and a second FSM that restores that snapshot over an
// empty history records the gap and fills it in from the first.
func TestFSM_HistoryKeepsTrimmedRunsAcrossSnapshots(t *testing.T) {
	t0 := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	year := 365 * 24 * time.Hour
	open := func(name string, set func(*history.Store)) *history.Store {
		h := &history.Store{Path: filepath.Join(t.TempDir(), name), FlushEvery: year, SweepEvery: year, FillEvery: year}
		if set != nil {
			set(h)
		}
		if err := h.Open(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(context.Background()) })
		return h
	}
	h1 := open("a.db", nil)
	f := fsm.NewFSM()
	f.MaxRuns, f.MaxEvents, f.History = 5, 10, h1
	idx := uint64(1)
	apply := func(v map[string]any) any {
		res := f.Apply(entry(t, idx, v))
		idx++
		return res
	}
	apply(map[string]any{"op": "elected", "elected": map[string]any{"node": "n1", "at": t0}})
	apply(map[string]any{"op": "set_jobs", "set_jobs": map[string]any{"jobs": []jobs.Spec{{Name: "a", Schedules: []string{"@every 1s"}, Shell: "true"}}, "source": "t", "at": t0}})
	for i := range 30 {
		at := t0.Add(time.Duration(i) * time.Second)
		apply(map[string]any{"op": "grant", "grant": map[string]any{"job": "a", "scheduled_at": at, "worker": "w", "trigger": "schedule", "at": at}})
		apply(map[string]any{"op": "complete", "complete": map[string]any{"attempt": jobs.AttemptID(jobs.RunID("a", at), 1), "state": "succeeded", "ended_at": at}})
	}
	if got := len(f.Runs(fsm.RunFilter{})); got > 6 {
		t.Fatalf("hot window holds %d runs", got)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if through, _ := h1.Coverage(); through != idx-1 {
		t.Fatalf("history durable through %d before the snapshot, want %d", through, idx-1)
	}
	sink := &snapSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	list := func(h *history.Store, sm *fsm.FSM) []string {
		page, err := h.ListRuns(sm.Runs(fsm.RunFilter{Job: "a"}), history.RunQuery{Job: "a", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range page.Runs {
			out = append(out, r.ID)
		}
		return out
	}
	all := list(h1, f)
	if len(all) != 30 {
		t.Fatalf("listed %d runs, want all 30: %v", len(all), all)
	}

	h2 := open("b.db", func(h *history.Store) {
		h.Peers = func() []string { return []string{"a"} }
		h.Fetch = func(_ context.Context, _ string, req history.RangeRequest) (history.RangePage, error) {
			return h1.Range(req)
		}
	})
	g := fsm.NewFSM()
	g.MaxRuns, g.MaxEvents, g.History = 5, 10, h2
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if _, gaps := h2.Coverage(); len(gaps) != 1 {
		t.Fatalf("gaps after restoring over an empty history: %v", gaps)
	}
	if err := h2.FillGap(context.Background(), history.Range{From: 0, To: idx - 1}); err != nil {
		t.Fatal(err)
	}
	if got := list(h2, g); !slices.Equal(got, all) {
		t.Fatalf("after the fill listed %v\nwant %v", got, all)
	}
}

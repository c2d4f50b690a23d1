package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// An entry this binary cannot read stops the FSM there: it is not
// skipped, nothing after it is applied, the halt is logged at error and
// counted, snapshots are refused (Raft must keep the entries after the
// halt), and Halted says why.
func TestFSM_HaltsAtAnEntryItCannotRead(t *testing.T) {
	newer, err := json.Marshal(replicated.Command{V: replicated.LogVersion + 1, Op: replicated.OpGrant, Grant: &replicated.GrantCmd{Job: "report", ScheduledAt: t0, Worker: "w1", At: t0}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		entry []byte
		says  string
	}{
		{"newer version", newer, fmt.Sprintf("log format version %d; this binary reads up to version %d", replicated.LogVersion+1, replicated.LogVersion)},
		{"unknown op", []byte(`{"v":2,"op":"backfill","backfill":{}}`), `op "backfill", unknown`},
		{"an op newer than its entry", []byte(`{"v":5,"op":"starts","starts":{"starts":[{"attempt":"report@x.1","at":"2026-07-01T09:00:00Z"}]}}`), `op "starts", unknown in log format version 5`},
		{"op without its payload", []byte(`{"v":2,"op":"grant"}`), "no payload"},
		{"not JSON", []byte("\x02garbage"), "cannot be decoded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			f := withJobs(t, "report")
			f.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			applyAt(t, f, 2, 10, grant("report", t0.Add(-5*time.Second)))
			if f.Halted() != nil || f.LogHalts() != 0 {
				t.Fatalf("halted before the entry: %v", f.Halted())
			}
			res := applyRaw(t, f, 2, 11, tc.entry)
			if !errors.Is(res.Err, ErrLogHalted) || !strings.Contains(res.Err.Error(), tc.says) || !strings.Contains(res.Err.Error(), "index 11") {
				t.Fatalf("apply: %v, want ErrLogHalted at index 11 saying %q", res.Err, tc.says)
			}
			// Nothing after it applies, however readable.
			if res := applyAt(t, f, 2, 12, grant("report", t0.Add(time.Minute))); !errors.Is(res.Err, ErrLogHalted) {
				t.Errorf("entry after the halt: %v, want ErrLogHalted", res.Err)
			}
			if _, ok := f.Run(jobs.RunID("report", t0.Add(time.Minute))); ok {
				t.Error("an entry after the halt was applied")
			}
			if got := f.LastIndex(); got != 10 {
				t.Errorf("last applied index = %d, want 10", got)
			}
			if err := f.Halted(); !errors.Is(err, ErrLogHalted) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Halted() = %v", err)
			}
			if n := f.LogHalts(); n != 1 {
				t.Errorf("LogHalts = %d, want 1", n)
			}
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "replicated log halted") || !strings.Contains(logs.String(), "index=11") {
				t.Errorf("log: %q, want an error line naming index 11", logs.String())
			}
			if _, err := f.Snapshot(); !errors.Is(err, ErrLogHalted) {
				t.Errorf("Snapshot of a halted FSM: %v, want refused", err)
			}
		})
	}
}

// Entries written before versions (no "v") are version 1 and apply.
func TestFSM_UnversionedEntriesAreVersion1(t *testing.T) {
	f := NewFSM()
	raw := `{"op":"set_jobs","set_jobs":{"jobs":[{"name":"report","schedules":["@every 5s"],"shell":"true"}],"source":"old","at":"2026-07-01T09:00:00Z"}}`
	if res := applyRaw(t, f, 1, 1, []byte(raw)); res.Err != nil {
		t.Fatal(res.Err)
	}
	raw = `{"op":"grant","grant":{"job":"report","scheduled_at":"2026-07-01T09:00:05Z","worker":"w1","trigger":"schedule","at":"2026-07-01T09:00:05Z"}}`
	if res := applyRaw(t, f, 2, 2, []byte(raw)); res.Err != nil || res.Run.State != jobs.Pending {
		t.Fatalf("old grant: %v, %s", res.Err, res.Run.State)
	}
	if f.Halted() != nil {
		t.Errorf("halted on an old entry: %v", f.Halted())
	}
}

// A snapshot carries LogVersion; one without a version (written before
// versions) restores as version 1; one of a newer version is refused,
// and halts the FSM.
func TestFSM_SnapshotVersions(t *testing.T) {
	f := withJobs(t, "report")
	applyAt(t, f, 2, 10, grant("report", t0))
	var top map[string]any
	if err := json.Unmarshal(snapshotBytes(t, f), &top); err != nil {
		t.Fatal(err)
	}
	if got := top["log_version"]; got != float64(replicated.LogVersion) {
		t.Errorf("snapshot log_version = %v, want %d", got, replicated.LogVersion)
	}

	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(unversionedSnapshot(t, f)))); err != nil {
		t.Fatalf("restore an unversioned snapshot: %v", err)
	}
	if _, ok := g.Run(jobs.RunID("report", t0)); !ok || g.Halted() != nil {
		t.Errorf("unversioned snapshot: run kept %v, halted %v", ok, g.Halted())
	}

	top["log_version"] = replicated.LogVersion + 1
	newer, _ := json.Marshal(top)
	h := NewFSM()
	h.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := h.Restore(io.NopCloser(bytes.NewReader(newer))); !errors.Is(err, ErrLogHalted) || !strings.Contains(err.Error(), fmt.Sprintf("snapshot of log format version %d", replicated.LogVersion+1)) {
		t.Fatalf("restore a newer snapshot: %v, want refused", err)
	}
	if _, ok := h.Run(jobs.RunID("report", t0)); ok || h.Halted() == nil || h.LogHalts() != 1 {
		t.Errorf("after refusing a newer snapshot: run restored %v, halted %v, halts %d", ok, h.Halted(), h.LogHalts())
	}
}

package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// savedSnapshot returns a snapshot of a cluster with two jobs and one
// granted run, as `fencecron snapshot save` writes it, decoded as plain
// JSON for a test to change.
func savedSnapshot(t *testing.T) map[string]any {
	t.Helper()
	f := withJobs(t, "report", "other")
	applyAt(t, f, 3, 2, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})
	if res := applyAt(t, f, 3, 3, grant("report", t0)); res.Err != nil {
		t.Fatal(res.Err)
	}
	return snapshotOf(t, f)
}

// snapshotOf is f's snapshot, decoded as JSON, to change.
func snapshotOf(t *testing.T, f *FSM) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	if _, err := f.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func encodeJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nullStaged is a job set difference's first part of two, staged, that
// sends a null job.
func nullStaged() map[string]any {
	return map[string]any{"base": "", "hash": "h", "parts": 2, "got": []any{true, false}, "upsert": []any{nil}}
}

// firstJob returns the snapshot's first job spec, to change.
func firstJob(m map[string]any) map[string]any { return m["jobs"].([]any)[0].(map[string]any) }

// TestPrepareRestore_RefusesCraftedSnapshots: every snapshot a restore
// would leave the cluster unable to live with is refused before Raft sees
// it, with an error that names the problem; the snapshot as saved passes.
func TestPrepareRestore_RefusesCraftedSnapshots(t *testing.T) {
	if _, _, err := replicated.PrepareRestore(encodeJSON(t, savedSnapshot(t)), replicated.RestoreFloor{}); err != nil {
		t.Fatalf("the snapshot as saved: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(m map[string]any)
		want   string
	}{
		{"a run in the order that is not in runs", func(m map[string]any) {
			m["order"] = append(m["order"].([]any), "ghost@20260101T000000Z")
		}, `order[1]: run "ghost@20260101T000000Z" is not in runs`},
		{"a null run", func(m map[string]any) { m["runs"].(map[string]any)["x"] = nil }, "runs[x]: null"},
		{"a null job", func(m map[string]any) { m["jobs"] = append(m["jobs"].([]any), nil) }, "jobs[2]: null"},
		{"a null job in a difference's parts", func(m map[string]any) { m["jobs_stage"] = nullStaged() }, "jobs_stage.upsert[0]: null"},
		{"a run under another id", func(m map[string]any) {
			runs := m["runs"].(map[string]any)
			id := m["order"].([]any)[0].(string)
			runs["other@20260101T000000Z"] = runs[id]
			delete(runs, id)
			m["order"] = []any{"other@20260101T000000Z"}
		}, "its id"},
		{"the same run twice in the order", func(m map[string]any) {
			m["order"] = append(m["order"].([]any), m["order"].([]any)[0])
		}, "listed twice"},
		{"last_index 2^63-1", func(m map[string]any) { m["last_index"] = uint64(math.MaxInt64) }, "no room left for new tokens"},
		{"last_index 2^64-1", func(m map[string]any) { m["last_index"] = uint64(math.MaxUint64) }, "no room left for new tokens"},
		{"epoch_base 2^62-1", func(m map[string]any) { m["epoch_base"] = uint64(1<<62 - 1) }, "epoch_base 4611686018427387903 is over"},
		{"an epoch near the top", func(m map[string]any) { m["epoch"] = uint64(1 << 41) }, "no room left for new epochs"},
		{"a token out of range", func(m map[string]any) {
			for _, r := range m["runs"].(map[string]any) {
				r.(map[string]any)["attempts"].([]any)[0].(map[string]any)["token"] = map[string]any{"epoch": 3, "seq": uint64(1 << 50)}
			}
		}, "out of the snapshot's range"},
		{"a schedule that does not parse", func(m map[string]any) { firstJob(m)["schedules"] = []any{"garbage !!"} }, `"garbage !!"`},
		{"a negative timeout", func(m map[string]any) { firstJob(m)["timeout"] = "-5s" }, "timeout"},
		{"a negative lease_ttl", func(m map[string]any) { firstJob(m)["lease_ttl"] = "-1s" }, "lease_ttl"},
		{"two jobs named report", func(m map[string]any) { m["jobs"].([]any)[1].(map[string]any)["name"] = "report" }, "job report: defined twice"},
		{"a job named ../evil", func(m map[string]any) { firstJob(m)["name"] = "../evil" }, "is not a DNS label"},
		{"max_output_bytes -1", func(m map[string]any) { firstJob(m)["max_output_bytes"] = -1 }, "max_output_bytes"},
		{"a job name no set could hold, kept per job", func(m map[string]any) {
			m["last_scheduled"].(map[string]any)["../evil"] = "2026-01-01T00:00:00Z"
		}, `"../evil" is not a job name`},
		{"a fire time in the far future", func(m map[string]any) {
			m["last_scheduled"].(map[string]any)["report"] = "9999-01-01T00:00:00Z"
		}, "is after 2200"},
		{"an open run with no attempt", func(m map[string]any) {
			for _, r := range m["runs"].(map[string]any) {
				r.(map[string]any)["state"] = "running"
				r.(map[string]any)["attempts"] = nil
			}
		}, "running with no attempt, and not waiting in a group's queue"},
		{"a notice to a target no job could name", func(m map[string]any) {
			m["notices"] = []any{map[string]any{"id": 1, "index": 1, "job": "report", "run": "x", "target": map[string]any{"webhook": "file:///etc/passwd"}}}
			m["notice_seq"] = 1
		}, "notices[0].target"},
		{"a wrapped counter", func(m map[string]any) { m["counters"].(map[string]any)["grants"] = uint64(math.MaxUint64) }, `counter "grants"`},
		{"a newer log format", func(m map[string]any) { m["log_version"] = replicated.LogVersion + 1 }, "this binary reads up to version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := savedSnapshot(t)
			tc.change(m)
			_, _, err := replicated.PrepareRestore(encodeJSON(t, m), replicated.RestoreFloor{})
			if !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PrepareRestore: %v; want ErrInvalidConfig naming %q", err, tc.want)
			}
		})
	}
}

// TestPrepareRestore_JobSetBounds: a snapshot's job set is held to the
// bounds of one applied through the API: its jobs' count, and a job's
// output cap against the store's body cap (floor.Limits).
func TestPrepareRestore_JobSetBounds(t *testing.T) {
	t.Run("more than MaxJobs", func(t *testing.T) {
		m := savedSnapshot(t)
		specs := make([]any, jobs.MaxJobs+1)
		for i := range specs {
			specs[i] = map[string]any{"name": fmt.Sprintf("j%d", i), "schedules": []any{"@every 5s"}, "shell": "true"}
		}
		m["jobs"] = specs
		if _, _, err := replicated.PrepareRestore(encodeJSON(t, m), replicated.RestoreFloor{}); !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), "a job set holds at most 200000") {
			t.Fatalf("%v; want the job count refused", err)
		}
	})
	t.Run("an output cap over the store's", func(t *testing.T) {
		m := savedSnapshot(t)
		firstJob(m)["max_output_bytes"] = 2 << 20
		if _, _, err := replicated.PrepareRestore(encodeJSON(t, m), replicated.RestoreFloor{Limits: jobs.Limits{MaxBodyBytes: 1 << 20}}); !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), "max_output_bytes") {
			t.Fatalf("%v; want max_output_bytes refused", err)
		}
	})
	t.Run("a horizon a year after now", func(t *testing.T) {
		m := savedSnapshot(t)
		m["horizon"] = map[string]any{"report": t0.AddDate(1, 0, 0)}
		if _, _, err := replicated.PrepareRestore(encodeJSON(t, m), replicated.RestoreFloor{Now: t0}); !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), "would hold its job back") {
			t.Fatalf("%v; want the horizon refused", err)
		}
		if _, _, err := replicated.PrepareRestore(encodeJSON(t, savedSnapshot(t)), replicated.RestoreFloor{Now: t0}); err != nil {
			t.Fatalf("the snapshot as saved, restored at its own time: %v", err)
		}
	})
	t.Run("a snapshot over MaxSnapshotBytes", func(t *testing.T) {
		if _, _, err := replicated.PrepareRestore(make([]byte, replicated.MaxSnapshotBytes+1), replicated.RestoreFloor{}); !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), "a snapshot is at most 256 MiB") {
			t.Fatalf("%v; want the size refused", err)
		}
	})
	t.Run("a spec left without a default gets it", func(t *testing.T) {
		m := savedSnapshot(t)
		delete(firstJob(m), "max_output_bytes")
		data, _, err := replicated.PrepareRestore(encodeJSON(t, m), replicated.RestoreFloor{})
		if err != nil {
			t.Fatal(err)
		}
		f := NewFSM()
		if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			t.Fatal(err)
		}
		if spec, _ := f.Spec("report"); spec.MaxOutputBytes != jobs.DefaultMaxOutputBytes {
			t.Errorf("max_output_bytes %d after the restore; want the default %d, a cap", spec.MaxOutputBytes, jobs.DefaultMaxOutputBytes)
		}
	})
}

// TestFSM_RestoreRefusesWhatItCannotIndex: FSM.Restore, which Raft calls
// on every server and on every restart, returns an error for a state it
// cannot index and keeps the state it had; it does not panic.
func TestFSM_RestoreRefusesWhatItCannotIndex(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(m map[string]any)
	}{
		{"a run in the order that is not in runs", func(m map[string]any) {
			m["order"] = append(m["order"].([]any), "ghost@20260101T000000Z")
		}},
		{"a null run", func(m map[string]any) { m["runs"].(map[string]any)["x"] = nil }},
		{"a null job", func(m map[string]any) { m["jobs"] = append(m["jobs"].([]any), nil) }},
		{"a null job in a difference's parts", func(m map[string]any) { m["jobs_stage"] = nullStaged() }},
		{"null job stats", func(m map[string]any) { m["job_stats"] = map[string]any{"report": nil} }},
		{"a null backfill", func(m map[string]any) { m["backfills"] = map[string]any{"report": nil} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := withJobs(t, "kept")
			m := savedSnapshot(t)
			tc.change(m)
			err := f.Restore(io.NopCloser(bytes.NewReader(encodeJSON(t, m))))
			if err == nil || errors.Is(err, replicated.ErrRestorePanic) {
				t.Fatalf("restore: %v; want it refused before the state is taken in", err)
			}
			if _, ok := f.Spec("kept"); !ok {
				t.Errorf("the state before the restore is gone after a refused one")
			}
		})
	}
}

// TestFSM_RestoredJobStatsWithoutRuns: figures of a job kept without their
// map of runs ({} in a snapshot) are filled in when the job's next run
// finishes; applying that entry does not panic (every server would apply
// it, on every restart).
func TestFSM_RestoredJobStatsWithoutRuns(t *testing.T) {
	m := savedSnapshot(t)
	m["job_stats"] = map[string]any{"report": map[string]any{}}
	data, _, err := replicated.PrepareRestore(encodeJSON(t, m), replicated.RestoreFloor{})
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	applyAt(t, f, 4, 10, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})
	r, _ := f.Run(jobs.RunID("report", t0))
	if res := applyAt(t, f, 4, 11, complete(r.Attempts[0].ID, jobs.Succeeded, 0, nil)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if err := f.Halted(); err != nil {
		t.Fatalf("halted: %v", err)
	}
}

// TestFSM_ApplyPanicHalts: an entry whose applying panics halts the FSM
// at that entry, as one it cannot read does, instead of taking the
// process down on every server and every restart.
func TestFSM_ApplyPanicHalts(t *testing.T) {
	f := withJobs(t, "report")
	f.st.Counters = nil // what Restore never lets in: counting an election panics
	res := applyAt(t, f, 2, 2, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})
	if !errors.Is(res.Err, ErrLogHalted) || !strings.Contains(res.Err.Error(), "panicked") {
		t.Fatalf("applied: %v; want the FSM halted at the entry that panicked", res.Err)
	}
	if !errors.Is(f.Halted(), ErrLogHalted) {
		t.Errorf("Halted() = %v", f.Halted())
	}
	if _, err := f.Snapshot(); err == nil {
		t.Error("a halted FSM took a snapshot of the state the panic left")
	}
}

// TestFSM_WriteSnapshotRefusesWhatRestoreWould: a backup a restore would
// refuse is not written; the operator learns it when saving, not on the
// day of the restore.
func TestFSM_WriteSnapshotRefusesWhatRestoreWould(t *testing.T) {
	f := withJobs(t, "report")
	applyAt(t, f, 2, 2, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})
	if _, err := f.WriteSnapshot(io.Discard); err != nil {
		t.Fatalf("a state the log made: %v", err)
	}
	f.st.Counters["grants"] = 1 << 63 // what no entry makes
	_, err := f.WriteSnapshot(io.Discard)
	if err == nil || !strings.Contains(err.Error(), "a restore would refuse this state") || errors.Is(err, jobs.ErrInvalidConfig) {
		t.Fatalf("WriteSnapshot: %v; want it refused as the node's fault", err)
	}
}

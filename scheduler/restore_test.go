package scheduler

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// TestPrepareRestore_EpochsKeepGrowing: a snapshot of a cluster at epoch 9,
// restored into one whose Raft terms start again at 1, mints tokens of
// greater epochs than any in the snapshot or the floor the caller knows.
func TestPrepareRestore_EpochsKeepGrowing(t *testing.T) {
	old := withJobs(t, "report", "other")
	applyAt(t, old, 9, 2, command{Op: opElected, Elected: &electedCmd{Node: "n1", At: t0}})
	res := applyAt(t, old, 9, 3, grant("report", t0))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var buf bytes.Buffer
	info, err := old.WriteSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if info.Epoch != 9 || info.LastIndex != 3 || info.Runs != 1 || info.Jobs != 2 || info.EpochBase != 0 {
		t.Fatalf("saved %+v; want epoch 9, last index 3, one run, no base", info)
	}

	for _, tc := range []struct {
		name     string
		floor    uint64
		wantBase uint64
	}{{"the snapshot's epoch", 0, 9}, {"a greater floor", 12, 12}} {
		t.Run(tc.name, func(t *testing.T) {
			data, info, err := PrepareRestore(buf.Bytes(), tc.floor)
			if err != nil {
				t.Fatal(err)
			}
			if info.EpochBase != tc.wantBase {
				t.Fatalf("base %d; want %d", info.EpochBase, tc.wantBase)
			}
			f := NewFSM()
			if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
				t.Fatal(err)
			}
			// A new cluster: term 2, the index after the restored one.
			applyAt(t, f, 2, 5, command{Op: opElected, Elected: &electedCmd{Node: "n2", At: t0.Add(time.Minute)}})
			if got, _ := f.Epoch(); got != tc.wantBase+2 {
				t.Errorf("epoch %d; want term 2 + base %d", got, tc.wantBase)
			}
			res := applyAt(t, f, 2, 6, grant("other", t0.Add(5*time.Second)))
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			a, _ := res.Run.Latest()
			if a.Token.Epoch != tc.wantBase+2 || a.Token.Epoch <= 9 {
				t.Errorf("token %+v; want epoch %d, greater than the snapshot's 9", a.Token, tc.wantBase+2)
			}
			// What the snapshot granted stays granted once.
			if res := applyAt(t, f, 2, 7, grant("report", t0)); !errors.Is(res.Err, jobs.ErrDuplicateRun) {
				t.Errorf("second grant of a restored run: %v; want ErrDuplicateRun", res.Err)
			}
			// A snapshot of the restored cluster keeps its base.
			var again bytes.Buffer
			if info, err := f.WriteSnapshot(&again); err != nil || info.EpochBase != tc.wantBase {
				t.Errorf("snapshot after restore: %+v, %v; want base %d", info, err, tc.wantBase)
			}
		})
	}
	if _, _, err := PrepareRestore([]byte("not json"), 0); !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Errorf("garbage: %v; want ErrInvalidConfig", err)
	}
}

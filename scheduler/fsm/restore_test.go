package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// TestPrepareRestore_EpochsKeepGrowing: a snapshot of a cluster at epoch 9,
// restored into one whose Raft terms start again at 1, mints tokens of
// greater epochs than any in the snapshot or the floor the caller knows.
func TestPrepareRestore_EpochsKeepGrowing(t *testing.T) {
	old := withJobs(t, "report", "other")
	applyAt(t, old, 9, 2, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})
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
			data, info, err := replicated.PrepareRestore(buf.Bytes(), replicated.RestoreFloor{Epoch: tc.floor})
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
			applyAt(t, f, 2, 5, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n2", At: t0.Add(time.Minute)}})
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
	if _, _, err := replicated.PrepareRestore([]byte("not json"), replicated.RestoreFloor{}); !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Errorf("garbage: %v; want ErrInvalidConfig", err)
	}
}

// TestPrepareRestore_InPlaceGrantsNoFireTimeTwice: a snapshot restored
// into the cluster it was taken from is older than the cluster; the fire
// times the cluster granted after it must not be granted again, and the
// ones after them still may be.
func TestPrepareRestore_InPlaceGrantsNoFireTimeTwice(t *testing.T) {
	live := withJobs(t, "report")
	applyAt(t, live, 2, 2, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})
	if res := applyAt(t, live, 2, 3, grant("report", t0)); res.Err != nil {
		t.Fatal(res.Err)
	}
	var saved bytes.Buffer
	if _, err := live.WriteSnapshot(&saved); err != nil {
		t.Fatal(err)
	}
	// After the backup the cluster went on: two more fire times granted.
	for i, at := range []time.Time{t0.Add(5 * time.Second), t0.Add(10 * time.Second)} {
		if res := applyAt(t, live, 2, uint64(4+i), grant("report", at)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	floor := replicated.RestoreFloor{Epoch: 2, Granted: live.GrantedThrough()}
	if got := floor.Granted["report"]; !got.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("GrantedThrough = %v; want the last fire time granted", got)
	}
	data, _, err := replicated.PrepareRestore(saved.Bytes(), floor)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	applyAt(t, f, 3, 7, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0.Add(11 * time.Second)}})
	for i, at := range []time.Time{t0.Add(5 * time.Second), t0.Add(10 * time.Second)} {
		if res := applyAt(t, f, 3, uint64(8+i), grant("report", at)); res.Err == nil {
			t.Errorf("fire time %s granted again after the restore: %+v", at.Format(time.TimeOnly), res.Run)
		}
	}
	if at, _ := f.LastScheduled("report"); !at.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("catch-up starts after %v; want the last fire time the cluster granted", at)
	}
	if res := applyAt(t, f, 3, 10, grant("report", t0.Add(15*time.Second))); res.Err != nil {
		t.Errorf("the next fire time: %v; want granted", res.Err)
	}
}

// An open attempt granted ahead may have had its start confirmed after
// the backup was taken: restored, it counts as confirmed, so no leader
// takes it over as never started beside a process that may be running.
func TestPrepareRestore_OpenStartsInLogCountAsConfirmed(t *testing.T) {
	live := withJobs(t, "report")
	applyAt(t, live, 2, 2, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})
	g := grant("report", t0)
	g.Grant.Ahead, g.Grant.At = true, t0.Add(-time.Second)
	run := applyAt(t, live, 2, 3, g).Run
	var saved bytes.Buffer
	if _, err := live.WriteSnapshot(&saved); err != nil {
		t.Fatal(err)
	}
	data, _, err := replicated.PrepareRestore(saved.Bytes(), replicated.RestoreFloor{Epoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	got, _ := f.Run(run.ID)
	if a := got.Attempts[0]; !a.StartInLog || !a.StartConfirmed {
		t.Fatalf("restored: %+v; want its start counted as confirmed", a)
	}
	applyAt(t, f, 3, 4, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0.Add(2 * time.Second)}})
	res := applyAt(t, f, 3, 5, replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: run.Attempts[0].ID, State: jobs.Lost, Reason: "lease before the start expired", Worker: "w2", At: t0.Add(2 * time.Second), NeverStarted: true, BeforeStart: true}})
	if !errors.Is(res.Err, ErrPreStartLeaseHeld) {
		t.Errorf("expiry before the start after the restore: %v; want ErrPreStartLeaseHeld", res.Err)
	}
}

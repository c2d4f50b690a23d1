package replicated

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
)

// SnapshotInfo describes a snapshot of the replicated state, as `fencecron
// snapshot save` writes it and `restore` reads it.
type SnapshotInfo struct {
	// LastIndex is the index of the last entry the snapshot holds.
	LastIndex uint64 `json:"last_index"`
	// Epoch is the greatest epoch the snapshot knows of: its last
	// leader's, or a greater one of a token it holds.
	Epoch uint64 `json:"epoch"`
	// EpochBase is what a cluster restored from it adds to its Raft
	// terms (PrepareRestore); 0 in a snapshot as saved.
	EpochBase uint64 `json:"epoch_base,omitempty"`
	Version   int    `json:"log_version"`
	Jobs      int    `json:"jobs"`
	Runs      int    `json:"runs"`
}

// RestoreFloor is what the cluster a snapshot is restored into knows
// beyond the snapshot.
type RestoreFloor struct {
	// Epoch: the cluster's current epoch, the store's greatest token.
	Epoch uint64
	// Granted is, per job, the latest scheduled time the cluster has
	// already granted or skipped (FSM.GrantedThrough). Restored in place,
	// a snapshot is older than the cluster: the fire times between the
	// two have been granted (and may have run), and the snapshot does not
	// know. Without this they would be granted a second time.
	Granted map[string]time.Time
	// Limits are what the cluster checks a job set against (PUT
	// /api/v1/jobset: Scheduler.CheckJobs); the snapshot's set must pass
	// them too.
	Limits jobs.Limits
	// Now is the time of the restore: no fire time of the snapshot may
	// lie more than a day after it (zero: not checked).
	Now time.Time
}

// PrepareRestore readies a saved snapshot for raft.Restore into a
// cluster. Raft keeps what it restores and every server takes it in, so
// the snapshot is checked whole first: the state itself (CheckState:
// every run and reference, every bound), its job set as PUT
// /api/v1/jobset checks one (jobs.CheckSet against floor.Limits,
// jobs.MaxSetBytes), and its size (MaxSnapshotBytes).
//
// Raft terms of a cluster started again from empty data begin at 1, and
// epochs are terms: restored as it is, a snapshot of a cluster that had
// reached epoch 40 would let the new cluster mint tokens of epoch 2,
// which every store key written before refuses (stale_owner). So the
// restored state gets an epoch base at least the greatest of the
// snapshot's epochs, its own base and floor.Epoch, and every epoch after
// the restore is the Raft term plus that base: greater than any seen
// before. Each job's horizon and last scheduled time are raised to
// floor.Granted's, so that no fire time is granted twice across the
// restore; the times after it go through the job's misfire policy. An
// open attempt granted ahead whose start the snapshot shows unconfirmed
// may have been confirmed after the snapshot was taken and be running:
// it is marked confirmed, so no leader takes it over as never started.
//
// It returns the snapshot to restore and what it holds. It refuses a
// snapshot it cannot read, of a newer log format, or that fails a check,
// with an error wrapping jobs.ErrInvalidConfig that names the problems.
func PrepareRestore(data []byte, floor RestoreFloor) ([]byte, SnapshotInfo, error) {
	if len(data) > MaxSnapshotBytes {
		return nil, SnapshotInfo{}, fmt.Errorf("%w: snapshot of %d bytes: a snapshot is at most %d MiB", jobs.ErrInvalidConfig, len(data), MaxSnapshotBytes>>20)
	}
	st, info, err := decodeSnapshot(data, floor.Now)
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	if err := checkRestoredJobs(&st, floor.Limits); err != nil {
		return nil, SnapshotInfo{}, err
	}
	base := max(info.Epoch, st.EpochBase, floor.Epoch)
	if base > math.MaxInt64/2 {
		return nil, SnapshotInfo{}, fmt.Errorf("%w: snapshot: epoch %d leaves no room for new epochs", jobs.ErrInvalidConfig, base)
	}
	st.EpochBase = base
	if st.Horizon == nil {
		st.Horizon = map[string]time.Time{}
	}
	if st.LastScheduled == nil {
		st.LastScheduled = map[string]time.Time{}
	}
	for _, r := range st.Runs {
		for i := range r.Attempts {
			if a := &r.Attempts[i]; a.StartInLog && !a.State.Terminal() {
				a.StartConfirmed = true
			}
		}
	}
	for job, at := range floor.Granted {
		if at.After(st.Horizon[job]) {
			st.Horizon[job] = at
		}
		if at.After(st.LastScheduled[job]) {
			st.LastScheduled[job] = at
		}
	}
	out, err := json.Marshal(st)
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	info.EpochBase = base
	return out, info, nil
}

// checkRestoredJobs checks a snapshot's job set as PUT /api/v1/jobset
// checks one (CheckJobSet), and stores it normalized: a spec that left
// out a field the snapshot's writer filled in gets its default here, not a
// zero (a max_output_bytes of 0 would be no cap at all).
func checkRestoredJobs(st *State, l jobs.Limits) error {
	specs, err := CheckJobSet(jobs.Values(st.Jobs), l, nil)
	if err != nil {
		return fmt.Errorf("snapshot: its job set: %w", err)
	}
	var size countingWriter
	if err := jobs.EncodeSpecs(&size, specs); err != nil {
		return fmt.Errorf("%w: snapshot: its job set: %v", jobs.ErrInvalidConfig, err)
	}
	if size > jobs.MaxSetBytes {
		return fmt.Errorf("%w: snapshot: its job set is %d MiB of JSON; a job set is at most %d MiB (jobs.MaxSetBytes)", jobs.ErrInvalidConfig, size>>20, jobs.MaxSetBytes>>20)
	}
	if len(specs) > 0 {
		st.JobsHash = jobs.HashSpecs(specs)
	}
	st.Jobs = jobs.Addrs(specs)
	st.HasJobs = st.HasJobs || len(specs) > 0
	return nil
}

// countingWriter counts what is written to it.
type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// decodeSnapshot decodes a snapshot's state once, checks it
// (CheckState, with fire times bounded by now) and says what it holds.
func decodeSnapshot(data []byte, now time.Time) (State, SnapshotInfo, error) {
	var st State
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&st); err != nil {
		return State{}, SnapshotInfo{}, fmt.Errorf("%w: not a fencecron snapshot: %v", jobs.ErrInvalidConfig, err)
	}
	if err := CheckState(&st, now); err != nil {
		return State{}, SnapshotInfo{}, err
	}
	return st, InfoOf(&st), nil
}

// InfoOf says what state st holds: the greatest epoch is its leader's,
// its base, or a greater one of a token it holds.
func InfoOf(st *State) SnapshotInfo {
	info := SnapshotInfo{LastIndex: st.LastIndex, Epoch: max(st.Epoch, st.EpochBase), EpochBase: st.EpochBase, Version: st.Version, Jobs: len(st.Jobs), Runs: len(st.Runs)}
	if info.Version == 0 {
		info.Version = 1 // written before versions
	}
	for _, r := range st.Runs {
		for _, a := range r.Attempts {
			info.Epoch = max(info.Epoch, a.Token.Epoch)
		}
	}
	return info
}

// RestoreMeta is the raft.SnapshotMeta raft.Restore needs for data.
func RestoreMeta(data []byte, info SnapshotInfo) *raft.SnapshotMeta {
	return &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, ID: fmt.Sprintf("restore-%d", time.Now().UnixMilli()), Index: info.LastIndex, Size: int64(len(data))}
}

// CheckJobSet normalizes specs and checks them whole against l
// (jobs.CheckSet): how every job set that enters the replicated state is
// checked, applied or restored; the jobs known marks are taken as valid
// on their own (jobs.CheckSet).
//
// specs is normalized in place: its caller hands it over. A copy of
// 100,000 specs, allocated while the heap holds the replicated set's own,
// cost the leader 0.4 s of an apply that changed one job.
func CheckJobSet(specs []jobs.Spec, l jobs.Limits, known []bool) ([]jobs.Spec, error) {
	for i := range specs {
		specs[i].Normalize()
	}
	if err := jobs.CheckSet(specs, l, known); err != nil {
		return nil, err
	}
	if LogVersion < VersionNamespaces {
		// A binary built to write an older version (the upgrade tests
		// build one) replicates no namespace, as that version did not.
		for i := range specs {
			if ns := specs[i].NamespaceName(); ns != jobs.DefaultNamespace {
				return nil, fmt.Errorf("%w: job %s: namespaces need log version %d; this binary writes %d", jobs.ErrInvalidConfig, specs[i].Name, VersionNamespaces, LogVersion)
			}
		}
	}
	return specs, nil
}

package fsm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Snapshot implements raft.FSM. The snapshot carries LogVersion. A
// halted FSM refuses: its state is older than the index Raft would label
// the snapshot with, and Raft would drop the entries in between.
// With a History, everything trimmed so far is made durable there first:
// the entries that trimmed it are never replayed once the log is
// compacted to this snapshot. (Raft calls Snapshot between applies, so
// nothing is trimmed meanwhile.)
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	snap, _, err := f.snapshot(false)
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// snapshot takes a snapshot and says what it holds, both of one applied
// index. With check, it refuses a state that a restore would refuse
// (CheckState).
func (f *FSM) snapshot(check bool) (*stateSnapshot, replicated.SnapshotInfo, error) {
	if f.History != nil {
		if err := f.History.Sync(); err != nil {
			return nil, replicated.SnapshotInfo{}, fmt.Errorf("no snapshot until the history is durable: %w", err)
		}
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.halted != nil {
		return nil, replicated.SnapshotInfo{}, fmt.Errorf("no snapshot: %w", f.halted)
	}
	// Raft takes the snapshot between two entries: Apply waits while
	// this runs. Everything Apply changes in place is encoded now; the
	// job set, most of a large state and never changed in place, is
	// encoded by Persist.
	st := f.st
	st.Version = replicated.LogVersion
	if check {
		if err := replicated.CheckState(&st, time.Time{}); err != nil {
			// Not the request's fault: no ErrInvalidConfig.
			return nil, replicated.SnapshotInfo{}, fmt.Errorf("a restore would refuse this state: %v", err)
		}
	}
	info := replicated.InfoOf(&st)
	set := st.Jobs
	st.Jobs = nil
	// Not HTML-escaped: a tail of "<" or "&" would take six times its
	// size in every snapshot.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(st); err != nil {
		return nil, replicated.SnapshotInfo{}, err
	}
	return &stateSnapshot{rest: bytes.TrimSuffix(b.Bytes(), []byte("\n")), jobs: set}, info, nil
}

// stateSnapshot is a snapshot of the state: rest, the state without its
// jobs, already encoded; the jobs are added to it as it is written.
type stateSnapshot struct {
	rest []byte
	jobs []*jobs.Spec
}

// Persist writes the state to Raft's sink (writeTo).
func (s *stateSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// writeTo writes the state as one JSON object: rest, with "jobs" added
// as its last field.
func (s *stateSnapshot) writeTo(w io.Writer) error {
	if len(s.jobs) == 0 {
		_, err := w.Write(s.rest)
		return err
	}
	if len(s.rest) < 2 || s.rest[len(s.rest)-1] != '}' {
		return fmt.Errorf("snapshot: state encoded as %.20q", s.rest)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.Write(s.rest[:len(s.rest)-1])
	if len(s.rest) > 2 {
		bw.WriteString(",")
	}
	bw.WriteString(`"jobs":`)
	if err := json.NewEncoder(bw).Encode(s.jobs); err != nil {
		return err
	}
	bw.WriteString("}")
	return bw.Flush()
}

func (s *stateSnapshot) Release() {}

// Restore implements raft.FSM. It refuses a snapshot of a newer format
// than LogVersion (and halts: the node cannot follow this cluster); a
// snapshot without a version is version 1. It refuses, with an error and
// the state unchanged, one it cannot index (CheckIndexable), and never
// panics: a panic while taking the state in is returned as an error. A
// snapshot it restores replaces the state whole, halted or not.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st := replicated.EmptyState()
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if st.Version == 0 {
		st.Version = 1
	}
	if st.Version > replicated.LogVersion {
		err := fmt.Errorf("snapshot of log format version %d (up to index %d); this binary reads up to version %d", st.Version, st.LastIndex, replicated.LogVersion)
		f.mu.Lock()
		f.halt(&raft.Log{Index: st.LastIndex}, err)
		err = f.halted
		f.mu.Unlock()
		return err
	}
	if err := replicated.CheckIndexable(&st); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	fresh := replicated.EmptyState()
	if st.Runs == nil {
		st.Runs = fresh.Runs
	}
	if st.Horizon == nil {
		st.Horizon = fresh.Horizon
	}
	if st.Paused == nil {
		st.Paused = fresh.Paused
	}
	if st.LastScheduled == nil {
		st.LastScheduled = fresh.LastScheduled
	}
	if st.Counters == nil {
		st.Counters = fresh.Counters
	}
	if st.LastRuns == nil {
		st.LastRuns = fresh.LastRuns
	}
	if st.GroupQueue == nil {
		st.GroupQueue = fresh.GroupQueue
	}
	if f.History != nil {
		// Before the state is replaced: a history that cannot record
		// what this snapshot skips must not lose track of it.
		if err := f.History.Restored(st.LastIndex); err != nil {
			return fmt.Errorf("restore snapshot: %w", err)
		}
	}
	if err := f.takeIn(st); err != nil {
		return fmt.Errorf("restore snapshot (up to index %d): %w", st.LastIndex, err)
	}
	f.changeHub.Publish([]Change{{Kind: ChangeRestored, Index: st.LastIndex}})
	f.applied.Signal()
	return nil
}

// takeIn replaces the state with st and indexes it. If that panics, the
// state before it is put back and the panic returned as an error
// (ErrRestorePanic), logged with its stack.
func (f *FSM) takeIn(st replicated.State) (err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	before, idx, halted := f.st, f.idx, f.halted
	defer func() {
		if p := recover(); p != nil {
			f.st, f.idx, f.halted, f.deps, f.groupsOf = before, idx, halted, nil, ""
			f.logger().Error("restore snapshot: panic while taking the state in; the state before it is kept", "index", st.LastIndex, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", replicated.ErrRestorePanic, p)
		}
	}()
	f.st = st
	f.halted = nil
	f.indexJobs(false)
	f.idx.allScheduled = false // until a set is applied
	f.indexRuns()
	// A snapshot written before runs waited for their retries as pending
	// (before snapshots carried a version) holds them as failed or lost;
	// settling again gives them their retry. A newer one holds every run
	// as the replicas that applied the log have it: settled again by the
	// job set of now, a run that failed for good before its job was given
	// more retries would become pending here alone.
	if st.Version < replicated.VersionDecideInApply {
		for _, r := range f.st.Runs {
			f.settle(r)
		}
	}
	return nil
}

// WriteSnapshot writes the FSM's state to w, in the format Restore and
// PrepareRestore read: the same bytes as Raft's own snapshots. It is
// consistent: one applied index. Take it on the leader after a barrier
// to include everything committed so far. What a restore would refuse is
// not written: a state CheckState refuses, or one over MaxSnapshotBytes
// (then w has had part of it).
func (f *FSM) WriteSnapshot(w io.Writer) (replicated.SnapshotInfo, error) {
	snap, info, err := f.snapshot(true)
	if err != nil {
		return replicated.SnapshotInfo{}, err
	}
	if err := snap.writeTo(&cappedWriter{w: w, left: replicated.MaxSnapshotBytes}); err != nil {
		return replicated.SnapshotInfo{}, fmt.Errorf("write snapshot: %w", err)
	}
	return info, nil
}

// errSnapshotTooLarge is a snapshot over MaxSnapshotBytes: the node's
// own state, not the request, is at fault.
var errSnapshotTooLarge = fmt.Errorf("the replicated state is over %d MiB, the most a restore takes (its job set and the output tails of its newest runs make it up)", replicated.MaxSnapshotBytes>>20)

// cappedWriter writes to w until left bytes are written, then refuses.
type cappedWriter struct {
	w    io.Writer
	left int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, errSnapshotTooLarge
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencecron/fencecron/jobs"
)

// A restored snapshot becomes the replicated state of every server, and
// Raft keeps it: a state that Apply, the leader or a page cannot live with
// would stop the cluster on every restart, and only wiping every server
// would bring it back. So a snapshot is checked whole before Raft sees it
// (PrepareRestore), against what the log itself could have produced, and
// FSM.Restore refuses one it cannot index rather than panic.

// Bounds on what a restore may bring into a cluster. Raft's log index
// never goes back, and epochs and tokens only grow across a restore: a
// snapshot whose index or epoch is near the top of a token's range would
// leave no room for the cluster's future tokens, for good. These leave a
// cluster that restored the greatest snapshot allowed room for 2^62
// further log entries and elections: centuries at any rate a cluster
// reaches.
const (
	// MaxRestoreIndex bounds a snapshot's last_index (2^48: 8,900 years of
	// a thousand entries a second), and so every index in it.
	MaxRestoreIndex = 1 << 48
	// MaxRestoreEpoch bounds a snapshot's epoch, epoch_base and every
	// token's epoch (2^40: an election a second for 34,000 years).
	MaxRestoreEpoch = 1 << 40
	// MaxSnapshotBytes bounds a snapshot sent for restore. Every server
	// decodes it whole, into several times its size: 160 MiB holds the
	// largest job set (jobs.MaxSetBytes) with its runs and audit trail.
	MaxSnapshotBytes = jobs.MaxSetBytes + 64<<20
)

// Bounds on the parts of a restored state that the log bounds as it
// applies entries: a snapshot may not bring in more.
const (
	// maxRestoreString bounds one text of a run, attempt, event or notice
	// (the largest the log keeps is a stdout tail of 16 KiB).
	maxRestoreString = 64 << 10
	// maxRestoreCounter bounds a counter, so that no increment wraps.
	maxRestoreCounter = 1 << 62
	// maxRestoreCounters bounds the counters by name.
	maxRestoreCounters = 64
	// maxRestoreProblems is how many problems a refusal lists.
	maxRestoreProblems = 10
)

// Times a restored state may hold: none before 1970 or after 2200 (a fire
// time in the far future would stop its job for good).
var (
	minRestoreTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxRestoreTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// restoreProblems collects what is wrong with a state, up to
// maxRestoreProblems, and how many there were.
type restoreProblems struct {
	list []string
	n    int
}

func (p *restoreProblems) add(format string, args ...any) {
	p.n++
	if len(p.list) < maxRestoreProblems {
		p.list = append(p.list, fmt.Sprintf(format, args...))
	}
}

func (p *restoreProblems) err() error {
	if p.n == 0 {
		return nil
	}
	more := ""
	if p.n > len(p.list) {
		more = fmt.Sprintf("; and %d more", p.n-len(p.list))
	}
	return fmt.Errorf("%w: snapshot: %s%s", jobs.ErrInvalidConfig, strings.Join(p.list, "; "), more)
}

// text checks one string of the state.
func (p *restoreProblems) text(what, s string) {
	if len(s) > maxRestoreString {
		p.add("%s: %d bytes; at most %d", what, len(s), maxRestoreString)
	} else if !utf8.ValidString(s) {
		p.add("%s: not valid UTF-8", what)
	}
}

// time checks one time of the state.
func (p *restoreProblems) time(what string, t time.Time) {
	if !t.IsZero() && (t.Before(minRestoreTime) || !t.Before(maxRestoreTime)) {
		p.add("%s: %s is not between 1970 and 2200", what, t.UTC().Format(time.RFC3339))
	}
}

// jobName checks a job name the state refers to.
func (p *restoreProblems) jobName(what, name string) {
	if !jobs.ValidName(name) {
		p.add("%s: %q is not a job name", what, clip(name, 80))
	}
}

// checkState says whether st is a state every part of the scheduler can
// live with: every run present, under its own id and in the order exactly
// once, every attempt numbered and named for its run, every reference to
// a run resolvable, every index, epoch, time, text and counter within the
// bounds above. It does not check the job set (PrepareRestore does) and
// reads st only.
func checkState(st *state) error {
	var p restoreProblems
	switch {
	case st.Version > LogVersion:
		p.add("log format version %d; this binary reads up to version %d", st.Version, LogVersion)
	case st.Version < 0:
		p.add("log format version %d", st.Version)
	}
	if st.LastIndex == 0 {
		p.add("it holds no applied entry (last_index 0)")
	}
	if st.LastIndex > MaxRestoreIndex {
		p.add("last_index %d is over %d: the restored cluster would have no room left for new tokens", st.LastIndex, uint64(MaxRestoreIndex))
	}
	for what, n := range map[string]uint64{"epoch": st.Epoch, "epoch_base": st.EpochBase, "range_refused_term": st.RangeRefusedTerm} {
		if n > MaxRestoreEpoch {
			p.add("%s %d is over %d: the restored cluster would have no room left for new epochs", what, n, uint64(MaxRestoreEpoch))
		}
	}
	for what, n := range map[string]uint64{"elected_index": st.ElectedIndex, "event_seq": st.EventSeq, "notice_seq": st.NoticeSeq} {
		if n > MaxRestoreIndex {
			p.add("%s %d is over %d", what, n, uint64(MaxRestoreIndex))
		}
	}
	if st.ElectedIndex > st.LastIndex {
		p.add("elected_index %d is after last_index %d", st.ElectedIndex, st.LastIndex)
	}
	p.text("leader", st.Leader)
	p.text("jobs_from", st.JobsFrom)
	p.time("elected_at", st.ElectedAt)
	p.time("jobs_at", st.JobsAt)
	checkRuns(&p, st)
	checkJobMaps(&p, st)
	if len(st.Counters) > maxRestoreCounters {
		p.add("%d counters; at most %d", len(st.Counters), maxRestoreCounters)
	}
	for name, n := range st.Counters {
		if len(name) > 64 || n > maxRestoreCounter {
			p.add("counter %q: %d", clip(name, 80), n)
		}
	}
	if len(st.Skips) > maxSkipRanges {
		p.add("%d skipped ranges; at most %d", len(st.Skips), maxSkipRanges)
	}
	for i, s := range st.Skips {
		p.jobName(fmt.Sprintf("skips[%d].job", i), s.Job)
		p.text(fmt.Sprintf("skips[%d].reason", i), s.Reason)
		p.time(fmt.Sprintf("skips[%d].from", i), s.From)
		p.time(fmt.Sprintf("skips[%d].to", i), s.To)
	}
	for i, e := range st.Events {
		checkEvent(&p, fmt.Sprintf("events[%d]", i), e, st)
	}
	if len(st.Notices) > maxNotices {
		p.add("%d notices pending; at most %d", len(st.Notices), maxNotices)
	}
	for i, n := range st.Notices {
		what := fmt.Sprintf("notices[%d]", i)
		p.jobName(what+".job", n.Job)
		p.text(what+".error", n.Error)
		p.text(what+".reason", n.Reason)
		p.time(what+".at", n.At)
		if n.ID > st.NoticeSeq {
			p.add("%s: id %d is after notice_seq %d", what, n.ID, st.NoticeSeq)
		}
	}
	return p.err()
}

// checkRuns checks st's runs and their order (checkState).
func checkRuns(p *restoreProblems, st *state) {
	inOrder := make(map[string]bool, len(st.Order))
	for i, id := range st.Order {
		switch {
		case inOrder[id]:
			p.add("order[%d]: run %q listed twice", i, clip(id, 120))
		case st.Runs[id] == nil:
			p.add("order[%d]: run %q is not in runs", i, clip(id, 120))
		}
		inOrder[id] = true
	}
	for id, r := range st.Runs {
		what := "runs[" + clip(id, 120) + "]"
		if r == nil {
			p.add("%s: null", what)
			continue
		}
		if !inOrder[id] {
			p.add("%s: not in order", what)
		}
		p.jobName(what+".job", r.Job)
		p.time(what+".scheduled_at", r.ScheduledAt)
		if r.ID != id || id != jobs.RunID(r.Job, r.ScheduledAt) {
			p.add("%s: its id %q is not %q, the id of job %q at %s", what, clip(r.ID, 120), clip(jobs.RunID(r.Job, r.ScheduledAt), 120), clip(r.Job, 80), r.ScheduledAt.UTC().Format(time.RFC3339Nano))
		}
		if !r.State.Known() {
			p.add("%s: state %q", what, clip(string(r.State), 32))
		}
		if r.Output != "" {
			if err := jobs.CheckKey(r.Output); err != nil {
				p.add("%s.output: not a store key: %v", what, err)
			}
		}
		p.text(what+".reason", r.Reason)
		p.text(what+".trigger", r.Trigger)
		p.text(what+".group", r.Group)
		for _, parent := range r.After {
			p.text(what+".after", parent)
		}
		for i := range r.Attempts {
			checkAttemptOf(p, fmt.Sprintf("%s.attempts[%d]", what, i), r, i, st)
		}
	}
	for group, waiters := range st.GroupQueue {
		for i, w := range waiters {
			if r := st.Runs[w.Run]; r == nil || r.Group != group {
				p.add("group_queue[%s][%d]: run %q is not a run of the group", clip(group, 80), i, clip(w.Run, 120))
			}
		}
	}
}

// checkAttemptOf checks attempt i of run r (checkRuns).
func checkAttemptOf(p *restoreProblems, what string, r *jobs.Run, i int, st *state) {
	a := &r.Attempts[i]
	if a.Number != i+1 || a.ID != jobs.AttemptID(r.ID, i+1) {
		p.add("%s: id %q and number %d; want %q and %d", what, clip(a.ID, 120), a.Number, clip(jobs.AttemptID(r.ID, i+1), 120), i+1)
	}
	if !a.State.Known() {
		p.add("%s: state %q", what, clip(string(a.State), 32))
	}
	if a.Token.Epoch > MaxRestoreEpoch || a.Token.Seq > st.LastIndex {
		p.add("%s: token %s is out of the snapshot's range (epoch at most %d, seq at most last_index %d)", what, a.Token, uint64(MaxRestoreEpoch), st.LastIndex)
	}
	for field, s := range map[string]string{"worker": a.Worker, "signal": a.Signal, "store_outcome": a.StoreOutcome, "error": a.Error, "stderr_tail": a.StderrTail, "stdout_tail": a.StdoutTail} {
		p.text(what+"."+field, s)
	}
	if len(a.StoreRefusals) > maxStoreRefusals {
		p.add("%s: %d store refusals; at most %d", what, len(a.StoreRefusals), maxStoreRefusals)
	}
	for _, s := range a.StoreRefusals {
		p.text(what+".store_refusals", s)
	}
	for field, t := range map[string]time.Time{"granted_at": a.GrantedAt, "accepted_at": a.AcceptedAt, "started_at": a.StartedAt, "ended_at": a.EndedAt} {
		p.time(what+"."+field, t)
	}
}

// checkJobMaps checks the parts of st kept per job (checkState). A job
// that left the set may still be named there; a name that no job set
// could hold may not.
func checkJobMaps(p *restoreProblems, st *state) {
	times := map[string]map[string]time.Time{"horizon": st.Horizon, "last_scheduled": st.LastScheduled}
	for field, m := range times {
		for job, t := range m {
			p.jobName(field, job)
			p.time(field+"["+clip(job, 80)+"]", t)
		}
	}
	for job := range st.Paused {
		p.jobName("paused", job)
	}
	for job, s := range st.LastRuns {
		p.jobName("last_runs", job)
		p.text("last_runs["+clip(job, 80)+"].id", s.ID)
		p.time("last_runs["+clip(job, 80)+"].scheduled_at", s.ScheduledAt)
	}
	for job, s := range st.JobStats {
		p.jobName("job_stats", job)
		if s == nil {
			p.add("job_stats[%s]: null", clip(job, 80))
		}
	}
	for job := range st.LastFinal {
		p.jobName("last_final", job)
	}
	for job, q := range st.Backfills {
		p.jobName("backfills", job)
		switch {
		case q == nil:
			p.add("backfills[%s]: null", clip(job, 80))
		case len(q.Times) > MaxBackfillTimes:
			p.add("backfills[%s]: %d fire times queued; at most %d", clip(job, 80), len(q.Times), MaxBackfillTimes)
		case q.MaxRunning < 0 || q.MaxRunning > MaxBackfillMaxRunning:
			p.add("backfills[%s]: max_running %d", clip(job, 80), q.MaxRunning)
		}
	}
}

// checkEvent checks one event of the audit trail (checkState).
func checkEvent(p *restoreProblems, what string, e jobs.Event, st *state) {
	if e.Seq > st.EventSeq {
		p.add("%s: seq %d is after event_seq %d", what, e.Seq, st.EventSeq)
	}
	if e.Index > st.LastIndex {
		p.add("%s: index %d is after last_index %d", what, e.Index, st.LastIndex)
	}
	if e.Token != nil && (e.Token.Epoch > MaxRestoreEpoch || e.Token.Seq > st.LastIndex) {
		p.add("%s: token %s is out of the snapshot's range", what, *e.Token)
	}
	if e.Epoch > MaxRestoreEpoch {
		p.add("%s: epoch %d is over %d", what, e.Epoch, uint64(MaxRestoreEpoch))
	}
	p.time(what+".time", e.Time)
	for field, s := range map[string]string{"kind": e.Kind, "node": e.Node, "job": e.Job, "run": e.Run, "attempt": e.Attempt, "detail": e.Detail} {
		p.text(what+"."+field, s)
	}
}

// checkIndexable is what FSM.Restore asks of every snapshot, its own
// ones included: only what indexing the state needs (a run for every id
// of the order, no null where the FSM keeps a pointer). It is less than
// checkState on purpose: a node must not refuse, on restart, a snapshot
// of its own that a later rule finds wanting.
func checkIndexable(st *state) error {
	var p restoreProblems
	for i, id := range st.Order {
		if st.Runs[id] == nil {
			p.add("order[%d]: run %q is not in runs", i, clip(id, 120))
		}
	}
	for id, r := range st.Runs {
		if r == nil {
			p.add("runs[%s]: null", clip(id, 120))
		}
	}
	for job, s := range st.JobStats {
		if s == nil {
			p.add("job_stats[%s]: null", clip(job, 80))
		}
	}
	for job, q := range st.Backfills {
		if q == nil {
			p.add("backfills[%s]: null", clip(job, 80))
		}
	}
	return p.err()
}

// errRestorePanic wraps a panic of FSM.Restore: a state the checks let
// through that the FSM still could not take in.
var errRestorePanic = errors.New("the FSM could not take in the snapshot's state")

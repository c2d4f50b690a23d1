package replicated

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencecron/fencecron/fencedstore"
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
	// MaxSnapshotBytes bounds a snapshot, saved or restored. Every server
	// decodes a restored one whole, into several times its size. 256 MiB
	// holds the largest job set (jobs.MaxSetBytes) with a hot window of
	// 2,000 runs whose attempts all kept 80 KiB of output tails; 100,000
	// typical jobs and their runs take 35 MiB.
	MaxSnapshotBytes = 256 << 20
)

// Bounds on the parts of a restored state that the log bounds as it
// applies entries: a snapshot may not bring in more.
const (
	// maxRestoreString bounds one text of a run, attempt, event or notice
	// (the largest the log keeps is a stderr tail of 64 KiB).
	maxRestoreString = 64 << 10
	// maxRestoreCounter bounds a counter, so that no increment wraps.
	maxRestoreCounter = 1 << 62
	// maxRestoreCounters bounds the counters by name (a log of version 1
	// counted every note's kind).
	maxRestoreCounters = 10_000
	// maxRestoreProblems is how many problems a refusal lists.
	maxRestoreProblems = 10
	// maxRestoreAhead bounds how far after the restore's own time a fire
	// time in the snapshot may lie: a run granted ahead is granted a
	// second early, and clocks disagree; a horizon a year ahead would stop
	// its job for a year.
	maxRestoreAhead = 24 * time.Hour
)

// maxRestoreTime bounds every other time of a restored state.
var maxRestoreTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// restoreProblems collects what is wrong with a state, up to
// maxRestoreProblems, and how many there were.
type restoreProblems struct {
	list []string
	n    int
	// fireBy bounds fire times (zero: no bound).
	fireBy time.Time
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
	if !t.Before(maxRestoreTime) {
		p.add("%s: %s is after 2200", what, t.UTC().Format(time.RFC3339))
	}
}

// fireTime checks a fire time of the state: a run's, a horizon, the last
// time granted, a queued one.
func (p *restoreProblems) fireTime(what string, t time.Time) {
	if !p.fireBy.IsZero() && t.After(p.fireBy) {
		p.add("%s: %s is more than %s after now: restored, it would hold its job back until then", what, t.UTC().Format(time.RFC3339), maxRestoreAhead)
		return
	}
	p.time(what, t)
}

// jobName checks a job name the state refers to.
func (p *restoreProblems) jobName(what, name string) {
	if !jobs.ValidQualifiedName(name) {
		p.add("%s: %q is not a job name", what, Clip(name, 80))
	}
}

// CheckState says whether st is a state every part of the scheduler can
// live with: what FSM.Restore needs (CheckIndexable); every run under its
// own id and in the order exactly once, with an attempt unless it waits
// in its group's queue; every attempt numbered and named for its run;
// every reference to a run resolvable; every index, epoch, text, counter
// and notification target within the bounds above; no fire time more than
// maxRestoreAhead after now (zero: not checked). It does not check the job
// set (PrepareRestore does) and reads st only. Problems are listed in a
// stable order: the order's, then by name.
func CheckState(st *State, now time.Time) error {
	p := restoreProblems{}
	if !now.IsZero() {
		p.fireBy = now.Add(maxRestoreAhead)
	}
	indexable(&p, st)
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
	for _, f := range []struct {
		what string
		n    uint64
	}{{"epoch", st.Epoch}, {"epoch_base", st.EpochBase}, {"range_refused_term", st.RangeRefusedTerm}} {
		if f.n > MaxRestoreEpoch {
			p.add("%s %d is over %d: the restored cluster would have no room left for new epochs", f.what, f.n, uint64(MaxRestoreEpoch))
		}
	}
	for _, f := range []struct {
		what string
		n    uint64
	}{{"event_seq", st.EventSeq}, {"notice_seq", st.NoticeSeq}} {
		if f.n > MaxRestoreIndex {
			p.add("%s %d is over %d", f.what, f.n, uint64(MaxRestoreIndex))
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
	for _, name := range slices.Sorted(maps.Keys(st.Counters)) {
		if n := st.Counters[name]; len(name) > 1024 || n > maxRestoreCounter {
			p.add("counter %q: %d", Clip(name, 80), n)
		}
	}
	if len(st.Skips) > MaxSkipRanges {
		p.add("%d skipped ranges; at most %d", len(st.Skips), MaxSkipRanges)
	}
	for i, s := range st.Skips {
		what := fmt.Sprintf("skips[%d]", i)
		p.jobName(what+".job", s.Job)
		p.text(what+".reason", s.Reason)
		p.fireTime(what+".from", s.From)
		p.fireTime(what+".to", s.To)
	}
	for i, e := range st.Events {
		checkEvent(&p, fmt.Sprintf("events[%d]", i), e, st)
	}
	if len(st.Notices) > MaxNotices {
		p.add("%d notices pending; at most %d", len(st.Notices), MaxNotices)
	}
	for i, n := range st.Notices {
		what := fmt.Sprintf("notices[%d]", i)
		p.jobName(what+".job", n.Job)
		p.text(what+".run", n.Run)
		p.text(what+".error", n.Error)
		p.text(what+".reason", n.Reason)
		p.time(what+".at", n.At)
		if n.ID > st.NoticeSeq || n.Index > st.LastIndex {
			p.add("%s: id %d and index %d are after notice_seq %d and last_index %d", what, n.ID, n.Index, st.NoticeSeq, st.LastIndex)
		}
		if err := n.Target.CheckTarget(jobs.Limits{}); err != nil {
			p.add("%s.target: %v", what, err)
		}
	}
	return p.err()
}

// checkRuns checks st's runs and their order (CheckState).
func checkRuns(p *restoreProblems, st *State) {
	inOrder := make(map[string]bool, len(st.Order))
	for i, id := range st.Order {
		if inOrder[id] {
			p.add("order[%d]: run %q listed twice", i, Clip(id, 120))
		}
		inOrder[id] = true
		if r := st.Runs[id]; r != nil {
			checkRun(p, "runs["+Clip(id, 120)+"]", id, r, st)
		}
	}
	if len(inOrder) != len(st.Runs) {
		for _, id := range slices.Sorted(maps.Keys(st.Runs)) {
			if !inOrder[id] {
				p.add("runs[%s]: not in order", Clip(id, 120))
			}
		}
	}
	for _, group := range slices.Sorted(maps.Keys(st.GroupQueue)) {
		for i, w := range st.GroupQueue[group] {
			r := st.Runs[w.Run]
			if r == nil || r.Group != group || !jobs.IsWaiting(*r) {
				p.add("group_queue[%s][%d]: run %q is not a run waiting in the group", Clip(group, 80), i, Clip(w.Run, 120))
			}
			p.fireTime(fmt.Sprintf("group_queue[%s][%d].scheduled_at", Clip(group, 80), i), w.ScheduledAt)
		}
	}
}

// checkRun checks run r, stored under id (checkRuns).
func checkRun(p *restoreProblems, what, id string, r *jobs.Run, st *State) {
	p.jobName(what+".job", r.Job)
	p.fireTime(what+".scheduled_at", r.ScheduledAt)
	if r.ID != id || id != jobs.RunID(r.Job, r.ScheduledAt) {
		p.add("%s: its id %q is not %q, the id of job %q at %s", what, Clip(r.ID, 120), Clip(jobs.RunID(r.Job, r.ScheduledAt), 120), Clip(r.Job, 80), r.ScheduledAt.UTC().Format(time.RFC3339Nano))
	}
	if !r.State.Known() {
		p.add("%s: state %q", what, Clip(string(r.State), 32))
	}
	if !r.State.Terminal() && len(r.Attempts) == 0 && !jobs.IsWaiting(*r) {
		// Nothing would ever end it: no lease to expire, no queue to
		// admit it, and its job's overlap policy would wait on it.
		p.add("%s: %s with no attempt, and not waiting in a group's queue", what, r.State)
	}
	if r.Output != "" {
		if err := fencedstore.CheckKey(r.Output); err != nil {
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

// checkAttemptOf checks attempt i of run r (checkRun).
func checkAttemptOf(p *restoreProblems, what string, r *jobs.Run, i int, st *State) {
	a := &r.Attempts[i]
	if a.Number != i+1 || a.ID != jobs.AttemptID(r.ID, i+1) {
		p.add("%s: id %q and number %d; want %q and %d", what, Clip(a.ID, 120), a.Number, Clip(jobs.AttemptID(r.ID, i+1), 120), i+1)
	}
	if !a.State.Known() {
		p.add("%s: state %q", what, Clip(string(a.State), 32))
	}
	if a.Token.Epoch > MaxRestoreEpoch || a.Token.Seq > st.LastIndex {
		p.add("%s: token %s is out of the snapshot's range (epoch at most %d, seq at most last_index %d)", what, a.Token, uint64(MaxRestoreEpoch), st.LastIndex)
	}
	p.text(what+".worker", a.Worker)
	p.text(what+".signal", a.Signal)
	p.text(what+".store_outcome", a.StoreOutcome)
	p.text(what+".error", a.Error)
	p.text(what+".stderr_tail", a.StderrTail)
	p.text(what+".stdout_tail", a.StdoutTail)
	if len(a.StoreRefusals) > MaxStoreRefusals {
		p.add("%s: %d store refusals; at most %d", what, len(a.StoreRefusals), MaxStoreRefusals)
	}
	for _, s := range a.StoreRefusals {
		p.text(what+".store_refusals", s)
	}
	p.time(what+".granted_at", a.GrantedAt)
	p.time(what+".accepted_at", a.AcceptedAt)
	p.time(what+".started_at", a.StartedAt)
	p.time(what+".ended_at", a.EndedAt)
}

// checkJobMaps checks the parts of st kept per job (CheckState). A job
// that left the set may still be named there; a name that no job set
// could hold may not.
func checkJobMaps(p *restoreProblems, st *State) {
	for _, m := range []struct {
		field string
		times map[string]time.Time
	}{{"horizon", st.Horizon}, {"last_scheduled", st.LastScheduled}} {
		for _, job := range slices.Sorted(maps.Keys(m.times)) {
			p.jobName(m.field, job)
			p.fireTime(m.field+"["+Clip(job, 80)+"]", m.times[job])
		}
	}
	for _, job := range slices.Sorted(maps.Keys(st.Paused)) {
		p.jobName("paused", job)
	}
	for _, job := range slices.Sorted(maps.Keys(st.LastRuns)) {
		s := st.LastRuns[job]
		p.jobName("last_runs", job)
		p.text("last_runs["+Clip(job, 80)+"].id", s.ID)
		p.fireTime("last_runs["+Clip(job, 80)+"].scheduled_at", s.ScheduledAt)
	}
	for _, job := range slices.Sorted(maps.Keys(st.JobStats)) {
		p.jobName("job_stats", job)
	}
	for _, job := range slices.Sorted(maps.Keys(st.LastFinal)) {
		p.jobName("last_final", job)
	}
	for _, job := range slices.Sorted(maps.Keys(st.Backfills)) {
		p.jobName("backfills", job)
		q := st.Backfills[job]
		switch {
		case q == nil: // indexable says so
		case len(q.Times) > MaxBackfillTimes:
			p.add("backfills[%s]: %d fire times queued; at most %d", Clip(job, 80), len(q.Times), MaxBackfillTimes)
		case q.MaxRunning < 0 || q.MaxRunning > MaxBackfillMaxRunning:
			p.add("backfills[%s]: max_running %d", Clip(job, 80), q.MaxRunning)
		default:
			for i, t := range q.Times {
				p.fireTime(fmt.Sprintf("backfills[%s].times[%d]", Clip(job, 80), i), t)
			}
		}
	}
}

// checkEvent checks one event of the audit trail (CheckState).
func checkEvent(p *restoreProblems, what string, e jobs.Event, st *State) {
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
	p.text(what+".kind", e.Kind)
	p.text(what+".node", e.Node)
	p.text(what+".job", e.Job)
	p.text(what+".run", e.Run)
	p.text(what+".attempt", e.Attempt)
	p.text(what+".detail", e.Detail)
}

// CheckIndexable is what FSM.Restore asks of every snapshot, its own
// ones included: only what indexing the state needs (a run for every id
// of the order, no null where the FSM keeps a pointer). It is less than
// CheckState on purpose: a node must not refuse, on restart, a snapshot
// of its own that a later rule finds wanting. PrepareRestore checks it
// too (CheckState): a user restore that FSM.Restore refused would stop
// the leader (hashicorp/raft panics on it).
func CheckIndexable(st *State) error {
	var p restoreProblems
	indexable(&p, st)
	return p.err()
}

// indexable adds the problems CheckIndexable looks for to p.
func indexable(p *restoreProblems, st *State) {
	for i, s := range st.Jobs {
		if s == nil {
			p.add("jobs[%d]: null", i)
		}
	}
	if st.JobsStage != nil {
		for i, s := range st.JobsStage.Upsert {
			if s == nil {
				p.add("jobs_stage.upsert[%d]: null", i)
			}
		}
	}
	for i, id := range st.Order {
		if st.Runs[id] == nil {
			p.add("order[%d]: run %q is not in runs", i, Clip(id, 120))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(st.Runs)) {
		if st.Runs[id] == nil {
			p.add("runs[%s]: null", Clip(id, 120))
		}
	}
	for _, job := range slices.Sorted(maps.Keys(st.JobStats)) {
		if st.JobStats[job] == nil {
			p.add("job_stats[%s]: null", Clip(job, 80))
		}
	}
	for _, job := range slices.Sorted(maps.Keys(st.Backfills)) {
		if st.Backfills[job] == nil {
			p.add("backfills[%s]: null", Clip(job, 80))
		}
	}
}

// ErrRestorePanic wraps a panic of FSM.Restore: a state the checks let
// through that the FSM still could not take in.
var ErrRestorePanic = errors.New("the FSM could not take in the snapshot's state")

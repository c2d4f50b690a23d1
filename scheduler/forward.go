package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/fsm/setdiff"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// Forwarder is what a node asks of the leader. Scheduler implements it
// (answering as leader, or forwarding through its Forwarder field);
// Scheduler.Local() answers only as the leader (jobs.ErrNotLeader
// otherwise) and is what the transport's server calls; the transport's
// client implements it over the network.
//
// A client retries a call whose reply was lost, so what a retry repeats
// must be harmless: most calls are idempotent (by attempt id, by job set
// hash; a trigger by the time it was asked, an ACL change by what it
// made, a policy delete by the policy gone); a retried Pause, Note, Audit
// or Backfill may add a second line to the audit trail. Errors wrap the
// jobs sentinels: ErrNotLeader (ask the leader again), ErrInvalidConfig
// (the leader refused what was sent: retrying gets the same), ErrUnknownJob,
// ErrNotFound, ErrStaleAttempt, ErrDuplicateRun. Implementations are safe
// for concurrent use.
type Forwarder interface {
	// SetJobs replaces the job set, or with a scope (namespace globs)
	// only the jobs of the namespaces it matches (local.SetJobs).
	SetJobs(ctx context.Context, specs []jobs.Spec, source string, scope []string) (hash string, err error)
	// SetJobsChanges applies a job set given as changes to the set
	// ch.Base (Scheduler.SetJobsChanges), or refuses with
	// fsm.ErrJobsDiffBase or ErrChangesNeedSet, having applied nothing.
	SetJobsChanges(ctx context.Context, ch JobChanges, source string) (hash string, jobs int, err error)
	// TriggerAt starts a run of job, scheduled at the millisecond of at,
	// when the node that took the request took it (the leader's clock if
	// at is zero, more than requestWindow behind it or more than
	// maxTriggerAhead ahead). A retry carries the same at, and so finds
	// the run the first try granted (a trigger twice in the same
	// millisecond is one run).
	TriggerAt(ctx context.Context, job string, force bool, at time.Time) (jobs.Run, error)
	Pause(ctx context.Context, job string, paused bool) error
	Started(ctx context.Context, attempt string, at time.Time) error
	Complete(ctx context.Context, c replicated.Completion) error
	// CompleteMany reports several completions (at most
	// worker.MaxCompleteBatch) at once, answering for each, in order, as
	// Complete would; its own error says none was recorded.
	CompleteMany(ctx context.Context, cs []replicated.Completion) ([]error, error)
	Note(ctx context.Context, attempt, kind, node, detail string) error
	Audit(ctx context.Context, kind, node, detail string) error
	Renew(ctx context.Context, attempt, node string) (worker.RenewReply, error)
	// RenewMany renews the leases of several attempts of node (at most
	// worker.MaxRenewBatch), answering for each, in order, as Renew would.
	RenewMany(ctx context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error)
	// Release ends attempt's lease now for reason, as asker asked, raises
	// its job's floor at the store to its token, and returns its run as
	// the entry left it with what became of the floor. An attempt a
	// release already ended is released again: the run is unchanged
	// (Again) and the floor raised again. Errors wrap
	// jobs.ErrInvalidConfig (no reason), jobs.ErrNotFound (no such
	// attempt), jobs.ErrStaleAttempt (it ended otherwise or was
	// superseded: nothing to release), jobs.ErrNotLeader. A floor the
	// store did not raise is no error: the lease is released all the
	// same, and Released.Floor says so.
	Release(ctx context.Context, attempt, reason, asker string) (Released, error)
	// Backfill queues runs of req.Job for the fire times in [req.From,
	// req.To) that have none (with DryRun, says which it would). Errors
	// wrap jobs.ErrUnknownJob, jobs.ErrInvalidConfig (an
	// *fsm.BackfillError when the request cannot be done as asked),
	// jobs.ErrNotLeader.
	Backfill(ctx context.Context, req fsm.BackfillRequest) (fsm.BackfillResult, error)
	// ACL changes the access control state as acl.Decide decides (log
	// version 10). Errors wrap the acl sentinels (the change is refused
	// whole), jobs.ErrNotLeader.
	ACL(ctx context.Context, c acl.Cmd) error
}

var (
	_ Forwarder     = (*Scheduler)(nil)
	_ Forwarder     = local{}
	_ worker.Leader = (*Scheduler)(nil)
)

// Bounds on what a caller may send the leader; the leader refuses more
// (jobs.ErrInvalidConfig) rather than replicate it.
const (
	maxSourceLen  = 512
	maxNodeLen    = 256
	maxErrorLen   = 4096
	maxStderrTail = 64 << 10
	maxSignalLen  = 32
	maxOutcomeLen = 32
)

// local is the leader's own answer to a Forwarder call: it re-validates
// everything it is sent, whoever sent it, then proposes it. A node that
// does not lead answers jobs.ErrNotLeader.
type local struct{ s *Scheduler }

// Local returns the leader-only Forwarder: what the transport's server
// calls for other nodes.
func (s *Scheduler) Local() Forwarder { return local{s} }

func (l local) leads(what string) error {
	if !l.s.Raft.IsLeader() {
		return fmt.Errorf("%s: %w", what, jobs.ErrNotLeader)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), jobs.ErrInvalidConfig)
}

// SetJobs checks the job set as the config parser does (jobs.CheckSet and
// Spec.Validate, output keys against the store's key rules, and
// max_output_bytes against the store's body cap), then replicates it: by
// difference from the replicated set when that fits one small entry
// (scheduler/fsm/jobsdiff.go), else whole. An invalid set changes nothing.
//
// A scope (namespace globs; an apply by a token limited to some
// namespaces) makes specs replace the jobs of the namespaces it matches
// only: every job of specs must be of one, and the other namespaces'
// jobs stay as the replicated set has them when the difference is
// computed, so two teams applying at once cannot undo each other.
func (l local) SetJobs(ctx context.Context, specs []jobs.Spec, source string, scope []string) (string, error) {
	return l.setJobsKnown(ctx, specs, KnownJobs{}, source, scope)
}

// KnownJobs marks the jobs of a set sent to SetJobsKnown that are jobs of
// the replicated set whose hash is Base, as it holds them: Kept[i] for the
// set's i-th job (nil: none).
type KnownJobs struct {
	Base string
	Kept []bool
}

// checkedSet is a job set a leader process checked whole under limits,
// normalized as this binary normalizes, and replicated as it checked it.
type checkedSet struct {
	hash   string
	limits jobs.Limits
}

// setJobsKnown is SetJobs with the jobs known marks checked only as part
// of the set, and, while the replicated set is still the one of hash
// known.Base, not compared with it either. The marks are trusted only
// when this process itself checked that set whole (l.s.checked), under
// the limits it checks against now: a set another leader checked, under
// its own limits, or that an older binary normalized, is checked job by
// job as SetJobs checks it.
func (l local) setJobsKnown(ctx context.Context, specs []jobs.Spec, known KnownJobs, source string, scope []string) (string, error) {
	if err := l.leads("set jobs"); err != nil {
		return "", err
	}
	if known.Kept != nil && len(known.Kept) != len(specs) {
		return "", fmt.Errorf("set jobs: %d jobs, %d marked as known", len(specs), len(known.Kept))
	}
	l.s.setJobs.Lock()
	defer l.s.setJobs.Unlock()
	limits := l.s.JobLimits()
	if known.Base == "" || l.s.checked != (checkedSet{known.Base, limits}) {
		known.Kept = nil
	}
	specs, err := replicated.CheckJobSet(specs, limits, known.Kept)
	if err != nil {
		return "", err
	}
	var inScope func(ns string) bool
	if len(scope) > 0 {
		if inScope, err = scopeOf(scope, specs); err != nil {
			return "", err
		}
	}
	if len(source) > maxSourceLen {
		source = replicated.Clip(source, maxSourceLen)
	}
	if !fsm.WritesJobsDiff() {
		if inScope != nil {
			return "", invalid("an apply limited to namespaces %v needs log version %d or later", scope, replicated.VersionJobsDiff)
		}
		hash := jobs.HashSpecs(specs)
		if _, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: source, At: l.s.now(), Hash: hash}}); err != nil {
			return "", err
		}
		l.s.checked = checkedSet{hash, limits}
		return hash, nil
	}
	if inScope != nil {
		known.Kept = nil // the set is rebuilt with the other namespaces' jobs
	}
	// Computed again if another set was applied meanwhile.
	for try := 1; ; try++ {
		hash, err := l.setJobsByDiff(ctx, specs, known, inScope, source)
		if try < 3 && errors.Is(err, fsm.ErrJobsDiffBase) {
			continue
		}
		if err != nil {
			l.s.checked = checkedSet{} // some parts may have applied
			return "", err
		}
		l.s.checked = checkedSet{hash, limits}
		return hash, nil
	}
}

// scopeOf is the test of an apply's scope, after it checked that scope's
// globs are valid and that every job of specs is of a namespace it
// matches.
func scopeOf(scope []string, specs []jobs.Spec) (func(ns string) bool, error) {
	for _, g := range scope {
		if err := acl.ValidGlob(g); err != nil {
			return nil, invalid("apply scope: %v", err)
		}
	}
	for i := range specs {
		if ns := specs[i].NamespaceName(); !acl.MatchAny(scope, ns) {
			return nil, invalid("job %s is of namespace %s, outside the apply's namespaces %v", specs[i].Name, ns, scope)
		}
	}
	return func(ns string) bool { return acl.MatchAny(scope, ns) }, nil
}

// setJobsByDiff replicates the difference between the replicated job
// set and specs, in parts of at most fsm.MaxJobsDiffBytes. With
// inScope, specs replace only the jobs of the namespaces it accepts, and
// the set they make is checked whole. It returns the new set's hash.
func (l local) setJobsByDiff(ctx context.Context, specs []jobs.Spec, known KnownJobs, inScope func(ns string) bool, source string) (string, error) {
	base := l.s.FSM.JobSetBase()
	if base.Hash != known.Base {
		known.Kept = nil // another set was applied since
	}
	next := specs
	if inScope != nil {
		var err error
		if next, err = l.s.CheckJobs(jobs.ReplaceNamespaces(base.Jobs, specs, inScope)); err != nil {
			return "", err
		}
	}
	hash := l.s.hasher.hashSet(next)
	// Outside the FSM's lock: Apply does not wait on 100,000 jobs.
	upsert, remove := setdiff.Of(base.Jobs, base.ByName, next, known.Kept)
	return hash, l.proposeDiff(ctx, jobsDiffParts(base.Hash, upsert, remove, hash, source, l.s.now()))
}

// proposeDiff replicates the parts of a job set difference, diffParallel
// of them proposed at once: Raft commits what is proposed together in
// fewer disk writes, and the FSM takes the parts in any order.
func (l local) proposeDiff(ctx context.Context, parts []replicated.SetJobsDiffCmd) error {
	if len(parts) == 1 {
		_, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &parts[0]})
		return err
	}
	// Every part is proposed even if one fails, so that each error is
	// reported; the FSM refuses the set unless all parts arrive.
	errs := make([]error, len(parts))
	var g errgroup.Group
	g.SetLimit(diffParallel)
	for i := range parts {
		g.Go(func() error {
			if _, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &parts[i]}); err != nil {
				errs[i] = fmt.Errorf("job set difference, part %d of %d: %w", i+1, len(parts), err)
			}
			return nil
		})
	}
	g.Wait()
	return errors.Join(errs...)
}

// diffParallel is how many parts of a job set difference the leader
// proposes at once: at most 16 MiB of entries waiting for their commit.
// Each disk write of the log is a sync, so the more a write holds the
// sooner the set is in: at 4, the 30 parts of 100,000 jobs took 0.6 to
// 0.85 s from the first proposal to the last part applied on `dev`, and
// 0.36 to 0.56 s at 16; with three servers, 3.7 s to every server
// having the set, against 2.7 s at 16.
const diffParallel = 16

// jobsDiffParts splits a job set difference into entries of at most
// fsm.MaxJobsDiffBytes each (a job larger than that alone in its part);
// a difference with nothing in it is one entry, which records the apply.
// A part's upserts are a window of upsert, not a copy: 100,000 specs
// copied cost the leader a sixth of a second.
func jobsDiffParts(base string, upsert []jobs.Spec, remove []string, hash, source string, at time.Time) []replicated.SetJobsDiffCmd {
	// The entry's envelope: op, version, hashes, part numbers, time.
	envelope := 256 + 6*len(source)
	var parts []replicated.SetJobsDiffCmd
	cur, size := replicated.SetJobsDiffCmd{}, envelope
	// add counts n bytes into the part being filled, after starting
	// another if they do not fit; it reports whether it did.
	add := func(n int) (started bool) {
		if size+n > fsm.MaxJobsDiffBytes && len(cur.Upsert)+len(cur.Remove) > 0 {
			parts, cur, size, started = append(parts, cur), replicated.SetJobsDiffCmd{}, envelope, true
		}
		size += n
		return started
	}
	from := 0 // the first upsert of the part being filled
	for i, n := range jobs.SpecSizes(upsert) {
		if add(n + 1) {
			from = i
		}
		cur.Upsert = upsert[from : i+1 : i+1]
	}
	for _, name := range remove {
		add(6*len(name) + 3) // quoted, escaped at worst, a comma
		cur.Remove = append(cur.Remove, name)
	}
	parts = append(parts, cur)
	for i := range parts {
		p := &parts[i]
		p.Base, p.Hash, p.Source, p.At = base, hash, source, at
		if len(parts) > 1 {
			p.Part, p.Parts = i, len(parts)
		}
	}
	return parts
}

// CheckJobs normalizes a job set, in place, and checks it as the config
// parser does (jobs.CheckSet: every spec, its output key by the store's
// key rules, max_output_bytes within MaxBodyBytes, email only with an SMTP
// server). It returns the normalized set, or an error wrapping
// jobs.ErrInvalidConfig that lists every problem.
func (s *Scheduler) CheckJobs(specs []jobs.Spec) ([]jobs.Spec, error) {
	return replicated.CheckJobSet(specs, s.JobLimits(), nil)
}

// JobLimits are what this node checks a job set against: the store's body
// cap, and email only with an SMTP server on this node (it may come to
// lead).
func (s *Scheduler) JobLimits() jobs.Limits {
	return jobs.Limits{MaxBodyBytes: s.MaxBodyBytes, NoSMTP: s.Notify.SMTP.Host == ""}
}

// TriggerAt starts a run of job as asked at at (Forwarder.TriggerAt),
// under the job's overlap policy unless force: the FSM decides
// (DecideGrant).
//
// The run is never scheduled after this clock's now: the FSM takes a
// job's latest scheduled time for its schedule's progress, and one a
// little ahead for a fire time granted ahead (leader.queueFor), so a run
// scheduled ahead would pass over the fire times before it. When the
// node that took the request reads a clock ahead of this one (by at most
// maxTriggerAhead), the leader waits for its clock to reach at; further
// ahead, the run is scheduled now, and a retry of it is not known.
func (l local) TriggerAt(ctx context.Context, job string, force bool, at time.Time) (jobs.Run, error) {
	t := l.s.term.Load()
	if t == nil {
		return jobs.Run{}, fmt.Errorf("trigger %s: %w", job, jobs.ErrNotLeader)
	}
	now := l.s.now()
	at = requestTime(at, now)
	if ahead := at.Sub(now); ahead > maxTriggerAhead {
		at = now
	} else if ahead > 0 {
		w := l.s.Clock.NewTimer(ahead)
		select {
		case <-w.C():
		case <-ctx.Done():
			w.Stop()
			return jobs.Run{}, fmt.Errorf("trigger %s: %w", job, ctx.Err())
		}
	}
	return t.trigger(ctx, job, force, at, now)
}

// maxTriggerAhead bounds how long the leader waits for its clock to reach
// the time a trigger was asked at (TriggerAt): the skew monitor's
// default threshold is half of it.
const maxTriggerAhead = time.Second

func (l local) Pause(ctx context.Context, job string, paused bool) error {
	if err := l.leads("pause " + job); err != nil {
		return err
	}
	if _, ok := l.s.FSM.Spec(job); !ok {
		return fmt.Errorf("pause %s: %w", job, jobs.ErrUnknownJob)
	}
	_, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpPause, Pause: &replicated.PauseCmd{Job: job, Paused: paused, At: l.s.now()}})
	return err
}

// checkAttempt refuses an attempt id that cannot name an attempt.
func checkAttempt(id string) error {
	if _, _, ok := jobs.SplitAttemptID(id); !ok || len(id) > 2*jobs.MaxNameLen+64 {
		return invalid("attempt %q is not an attempt id", replicated.Clip(id, 80))
	}
	return nil
}

func (l local) Started(ctx context.Context, attempt string, at time.Time) error {
	if err := l.leads("started " + attempt); err != nil {
		return err
	}
	if err := checkAttempt(attempt); err != nil {
		return err
	}
	s := replicated.StartCmd{Attempt: attempt, At: at.UTC()}
	if lead := l.s.term.Load(); lead != nil {
		return lead.start(ctx, s) // committed in a group
	}
	_, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpStart, Start: &s})
	return err
}

func (l local) Complete(ctx context.Context, c replicated.Completion) error {
	if err := l.leads("complete " + c.Attempt); err != nil {
		return err
	}
	if err := checkCompletion(c); err != nil {
		return err
	}
	if lead := l.s.term.Load(); lead != nil {
		return lead.complete(ctx, c) // committed in a group
	}
	_, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpComplete, Complete: &c})
	return err
}

// checkCompletion refuses a completion that no worker sends: an unknown
// or open state, or fields beyond their bounds.
func checkCompletion(c replicated.Completion) error {
	switch {
	case checkAttempt(c.Attempt) != nil:
		return checkAttempt(c.Attempt)
	case !c.State.Known() || !c.State.Terminal() || c.State == jobs.Skipped:
		return invalid("complete %s: state %q is not how an attempt ends", c.Attempt, replicated.Clip(string(c.State), 32))
	case len(c.Node) > maxNodeLen, len(c.Signal) > maxSignalLen, len(c.StoreOutcome) > maxOutcomeLen,
		len(c.Error) > maxErrorLen, len(c.StderrTail) > maxStderrTail:
		return invalid("complete %s: a field is too long (node %d, signal %d, store_outcome %d, error %d, stderr_tail %d bytes; at most %d, %d, %d, %d, %d)",
			c.Attempt, len(c.Node), len(c.Signal), len(c.StoreOutcome), len(c.Error), len(c.StderrTail),
			maxNodeLen, maxSignalLen, maxOutcomeLen, maxErrorLen, maxStderrTail)
	case len(c.StdoutTail) > worker.StdoutTailBytes || !utf8.ValidString(c.StdoutTail):
		return invalid("complete %s: stdout_tail of %d bytes: at most %d bytes of UTF-8", c.Attempt, len(c.StdoutTail), worker.StdoutTailBytes)
	}
	return nil
}

func (l local) Note(ctx context.Context, attempt, kind, node, detail string) error {
	if err := l.leads("note " + attempt); err != nil {
		return err
	}
	if err := checkAttempt(attempt); err != nil {
		return err
	}
	if err := fsm.CheckNote(kind, detail); err != nil {
		return err
	}
	if len(node) > maxNodeLen {
		return invalid("note: node name of %d bytes", len(node))
	}
	_, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpNote, Note: &replicated.NoteCmd{Attempt: attempt, Kind: kind, Node: node, Detail: detail, At: l.s.now()}})
	return err
}

func (l local) Audit(ctx context.Context, kind, node, detail string) error {
	if err := l.leads("audit"); err != nil {
		return err
	}
	if err := fsm.CheckAudit(kind); err != nil {
		return err
	}
	if len(node) > maxNodeLen {
		return invalid("audit: node name of %d bytes", len(node))
	}
	// The FSM cuts a long detail.
	_, err := l.s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpAudit, Audit: &replicated.AuditCmd{Kind: kind, Node: node, Detail: detail, At: l.s.now()}})
	return err
}

func (l local) Renew(ctx context.Context, attempt, node string) (worker.RenewReply, error) {
	t := l.s.term.Load()
	if t == nil {
		return worker.RenewReply{}, fmt.Errorf("renew %s: %w", attempt, jobs.ErrNotLeader)
	}
	out, err := t.renewAll(ctx, node, []worker.Renewal{{Attempt: attempt}})
	if err != nil {
		return worker.RenewReply{}, err
	}
	return out[0], nil
}

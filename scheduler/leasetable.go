package scheduler

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// lease is the leader's in-memory view of an attempt's ownership.
type lease struct {
	attempt, run, job, worker string
	token                     jobs.Fence
	ttl                       time.Duration
	deadline                  time.Time
	// confirming: the worker confirms starts before starting; started:
	// this term confirmed the attempt's start (startconfirm.go).
	confirming, started bool
	// short is the lease before the start of an attempt this term
	// granted ahead, or of one an earlier term granted ahead whose start
	// the log confirms and had not confirmed when this term began (0:
	// none; scheduler/fsm/prestart.go); onShort says the deadline in
	// force is a short one, and preStart that the worker said it holds
	// the short lease. inLog: the log, not this term's memory, says the
	// start was never confirmed.
	short                    time.Duration
	onShort, preStart, inLog bool
}

// newLease is att's lease of ttl, running from now.
func newLease(run jobs.Run, att jobs.Attempt, ttl time.Duration, now time.Time) *lease {
	return &lease{attempt: att.ID, run: run.ID, job: run.Job, worker: att.Worker, token: att.Token, ttl: ttl, deadline: now.Add(ttl)}
}

// chooseWorker picks an alive node whose tags match the job's target and
// that has room for the job's attempt under its limit (node.max_attempts,
// weighed by jobs.Spec.AttemptLoad), the
// least loaded first, avoiding `avoid` if any other will do. Ties go by a
// hash of run and node, so load spreads without coordination. Its error
// is errWorkersFull, or noWorker's when no alive node matches.
func (l *leader) chooseWorker(spec jobs.Spec, runID, avoid string) (string, error) {
	return pickWorker(l.s.Raft.Members(), l.s.FSM.OpenLoadByWorker(), spec, runID, avoid, l.shunned())
}

// goneFor is how long a worker a dispatch showed gone is chosen last,
// unless it is heard from: about as long as gossip takes to call a dead
// node suspect. A node that died as this leader was elected is alive in
// gossip for seconds, and each run granted to it costs a short lease
// before another worker takes it over; one refused dispatch (often
// recovery's, of a run the dead node held) is enough to stop choosing it
// while another worker will do.
const goneFor = 5 * time.Second

// shunned returns the workers a dispatch showed gone within goneFor
// (pickWorker chooses them only if no other worker will do), and forgets
// older ones.
func (l *leader) shunned() map[string]bool {
	now := l.goneClock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out map[string]bool
	for name, at := range l.goneAt {
		if now.Sub(at) >= goneFor {
			delete(l.goneAt, name)
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[name] = true
	}
	return out
}

// heardFrom records what a dispatch to worker showed (err nil: it took
// it, or it renewed): one that showed it gone is shunned (shunned); a
// dispatch it took, or a renewal from it, clears that.
func (l *leader) heardFrom(worker string, err error) {
	now := l.goneClock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		delete(l.goneAt, worker)
	case workerGone(err):
		l.goneAt[worker] = now
	}
}

// errWorkersFull is why no worker was picked when some match the job
// but each holds its limit of open attempts: the cluster is overloaded.
var errWorkersFull = errors.New("overloaded: every worker the job may run on holds its limit of open attempts (node.max_attempts)")

// noWorker is why no worker matches spec's target.
func noWorker(spec jobs.Spec) error {
	return fmt.Errorf("no alive worker matches target %v", spec.Target)
}

// pickWorker is chooseWorker's choice among members, given each node's
// open attempts.
func pickWorker(members []election.Member, load map[string]int, spec jobs.Spec, runID, avoid string, shun map[string]bool) (string, error) {
	type cand struct {
		name string
		load int
		tie  uint64
	}
	var cands []cand
	full := false
	for _, m := range members {
		if m.State != "alive" || m.Meta.HTTPAddr == "" || m.Meta.Leaving || m.Meta.NoJobs {
			continue
		}
		match := true
		for k, v := range spec.Target {
			if m.Meta.Tags[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		if load[m.Name]+spec.AttemptLoad() > m.Meta.AttemptLimit()*jobs.ProcessLoad {
			full = true
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(spec.Name + "\x00" + runID + "\x00" + m.Name))
		cands = append(cands, cand{m.Name, load[m.Name], h.Sum64()})
	}
	// Chosen only if no other will do: a worker shown gone, then avoid.
	cands = lastResort(cands, func(c cand) bool { return shun[c.name] })
	cands = lastResort(cands, func(c cand) bool { return c.name == avoid })
	switch {
	case len(cands) == 0 && full:
		return "", errWorkersFull
	case len(cands) == 0:
		return "", noWorker(spec)
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].load != cands[j].load {
			return cands[i].load < cands[j].load
		}
		return cands[i].tie < cands[j].tie
	})
	return cands[0].name, nil
}

// lastResort drops the candidates last says to keep for last, unless
// that leaves none; it copies cs only to drop some.
func lastResort[T any](cs []T, last func(T) bool) []T {
	if !slices.ContainsFunc(cs, last) {
		return cs
	}
	if kept := slices.DeleteFunc(slices.Clone(cs), last); len(kept) > 0 {
		return kept
	}
	return cs
}

// track starts the lease of a new attempt and dispatches it.
func (l *leader) track(run jobs.Run, att jobs.Attempt, spec jobs.Spec) {
	l.dispatch(l.lease(run, att, spec))
}

// lease starts the lease of a new attempt and returns its assignment. An
// attempt granted ahead of its fire time starts on the short lease before
// its start.
func (l *leader) lease(run jobs.Run, att jobs.Attempt, spec jobs.Spec) worker.Assignment {
	a := worker.Assignment{Run: run, Attempt: att, Spec: spec}
	now := l.s.Clock.Now()
	le := newLease(run, att, spec.Lease(), now)
	if a.StartAt().After(now) {
		le.short, le.onShort = spec.PreStartLease(), true
		le.deadline = now.Add(le.short)
	}
	l.mu.Lock()
	l.leases[att.ID] = le
	l.mu.Unlock()
	if l.s.Tracer != nil {
		span := l.s.Tracer.Granted(run, att, l.s.now())
		a.TraceParent = span.TraceParent()
		l.mu.Lock()
		l.dispatching[att.ID] = span
		l.mu.Unlock()
	}
	return a
}

// dispatched ends the "dispatched" span of an attempt (tracing on): the
// worker took it, or, with err, the leader gave up dispatching it.
func (l *leader) dispatched(attempt string, err error) {
	if l.s.Tracer == nil {
		return
	}
	l.mu.Lock()
	span := l.dispatching[attempt]
	delete(l.dispatching, attempt)
	l.mu.Unlock()
	span.End(err)
}

// dispatch delivers an assignment, retrying with the same attempt id
// (never a new attempt) until the worker takes it, the lease goes, or the
// term ends.
func (l *leader) dispatch(a worker.Assignment) {
	l.mu.Lock()
	if l.inflight[a.Attempt.ID] {
		l.mu.Unlock()
		return
	}
	l.inflight[a.Attempt.ID] = true
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() {
			l.mu.Lock()
			delete(l.inflight, a.Attempt.ID)
			l.mu.Unlock()
		}()
		backoff := 100 * time.Millisecond
		for tries := 1; ; tries++ {
			ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
			err := l.s.Dispatcher.Dispatch(ctx, a.Attempt.Worker, a)
			cancel()
			l.heardFrom(a.Attempt.Worker, err)
			if err == nil {
				if tries > 1 {
					l.log.Info("dispatched after retries", a.Attempt.LogArgs("worker", a.Attempt.Worker, "tries", tries)...)
				}
				l.dispatched(a.Attempt.ID, nil)
				return
			}
			l.log.Warn("dispatch failed; retrying with the same attempt", a.Attempt.LogArgs("worker", a.Attempt.Worker, "err", err)...)
			l.undelivered(a, err)
			if !l.leased(a.Attempt.ID) {
				l.dispatched(a.Attempt.ID, err)
				return // expired or finished meanwhile: a new attempt, if any, has its own dispatch
			}
			select {
			case <-l.ctx.Done():
				l.dispatched(a.Attempt.ID, l.ctx.Err())
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
}

// undelivered holds an attempt whose dispatch failed (with err) to the
// short lease before the start, counted from its grant, if this term
// granted it (or the log says nobody let it start), no start was
// confirmed and its worker has not renewed it with this term: that
// worker cannot start it without this leader's word, so a worker that is
// gone (a node that died as this leader was elected, before gossip said
// so, or the dead leader holding a run it granted ahead to itself, which
// recovery dispatches again) costs the run a short lease from the grant,
// not a whole one, nor one from this election. A worker that did take it
// renews, and gets its lease back (renew). An earlier term's attempt
// keeps the grace recovery gave it unless its worker is shown gone
// (workerGone): a new leader may not have heard of every live worker yet.
func (l *leader) undelivered(a worker.Assignment, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	le := l.leases[a.Attempt.ID]
	if le == nil || le.started || le.confirming || !(le.inLog || fsm.GrantedSinceElection(le.token, l.electedEpoch, l.electedEpoch, l.electedIndex)) {
		return
	}
	if le.inLog && !workerGone(err) {
		return
	}
	if !le.onShort {
		le.short, le.onShort = a.Spec.PreStartLease(), true
	}
	if d := a.Attempt.GrantedAt.Add(le.short); d.Before(le.deadline) {
		le.deadline = d
	}
}

// workerGone reports whether a dispatch's error shows its worker gone:
// its host refused the connection (nothing listens there) or gossip says
// it is not alive.
func workerGone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, election.ErrNotAlive)
}

func (l *leader) leased(attempt string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.leases[attempt]
	return ok
}

// renew extends an attempt's lease if it is still the node's, and
// confirms its start if asked; any other answer is a definite "not
// yours". A start is confirmed only while this loop's election entry is
// the last one applied: a loop that outlived its term may answer for an
// attempt a newer leader granted and will expire (errStaleLoop). inLog
// says the start must be confirmed in the log before the answer goes out
// (renewAll).
func (l *leader) renew(r worker.Renewal, node string) (reply worker.RenewReply, inLog bool, err error) {
	attemptID := r.Attempt
	run, att, ok := l.current(attemptID)
	switch {
	case !ok:
		return worker.RenewReply{Reason: fmt.Sprintf("attempt %s is not current: it ended or was superseded", attemptID)}, false, nil
	case att.Worker != node:
		return worker.RenewReply{Reason: fmt.Sprintf("attempt %s belongs to %s, not %s", attemptID, att.Worker, node)}, false, nil
	}
	// A worker that does not say it confirms starts may start on any
	// renewal answered Held (an older one, or one whose renewal was sent
	// again without starts to a leader that refused them): every such
	// renewal is a start.
	start := r.Start || !r.Confirming
	if start {
		// After current: an attempt granted since another election
		// entry is seen only with that entry applied.
		if epoch, index := l.s.FSM.Elected(); epoch != l.electedEpoch || index != l.electedIndex || !l.s.Raft.IsLeader() {
			return worker.RenewReply{}, false, fmt.Errorf("confirm the start of %s: %w", attemptID, errStaleLoop)
		}
	}
	now := l.s.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if start && l.unstarted[attemptID] {
		return worker.RenewReply{Reason: fmt.Sprintf("attempt %s's lease ran out before its start was confirmed; another attempt takes the run over", attemptID)}, false, nil
	}
	le := l.leases[attemptID]
	if le == nil {
		// Granted before this term (recovery gives it a lease, and may
		// not have yet) or expired here a moment ago but not yet
		// applied: recreate it.
		spec, _ := l.s.FSM.Spec(run.Job)
		le = recoveredLease(run, att, spec, now)
		l.leases[attemptID] = le
	}
	le.confirming = le.confirming || r.Confirming
	// A start the log must confirm counts once it has (renewAll).
	inLog = start && att.StartInLog && !att.StartConfirmed
	le.started = le.started || (start && !inLog)
	// Until its start is confirmed, an attempt granted ahead whose worker
	// holds the short lease gets no more than that.
	ttl := le.ttl
	le.onShort = le.short > 0 && r.PreStart && !le.started
	if le.onShort {
		ttl, le.preStart = le.short, true
	}
	le.deadline = now.Add(ttl)
	return worker.RenewReply{Held: true, TTL: jobs.Duration(ttl), Started: r.Start && !inLog}, inLog, nil
}

// current returns the attempt if it is its run's latest and still open.
func (l *leader) current(attemptID string) (jobs.Run, jobs.Attempt, bool) {
	runID, n, ok := jobs.SplitAttemptID(attemptID)
	if !ok {
		return jobs.Run{}, jobs.Attempt{}, false
	}
	run, ok := l.s.FSM.Run(runID)
	if !ok || n != len(run.Attempts) {
		return jobs.Run{}, jobs.Attempt{}, false
	}
	a := run.Attempts[n-1]
	return run, a, !a.State.Terminal()
}

// recoveredLease is the lease this term gives an attempt of spec's job it
// did not grant: the whole lease_ttl from now, or, for one granted ahead
// whose start the log shows nobody confirmed, the short lease before the
// start (scheduler/fsm/prestart.go): its worker has not begun it. A job
// gone from the set (a zero spec) has the default lease.
func recoveredLease(run jobs.Run, a jobs.Attempt, spec jobs.Spec, now time.Time) *lease {
	le := newLease(run, a, spec.Lease(), now)
	if a.State == jobs.Pending && a.StartInLog && !a.StartConfirmed {
		le.short, le.onShort, le.inLog = spec.PreStartLease(), true, true
		le.deadline = now.Add(le.short)
	}
	return le
}

// checkLeases expires every lease whose deadline passed, granting the run's
// next attempt to another worker in the same Raft entry when allowed.
func (l *leader) checkLeases() {
	now := l.s.Clock.Now()
	// A worker confirms its starts if it said so in a renewal or its
	// node says so in gossip (one that died before its first renewal).
	// Only this term's own grants, and those the log says nobody let
	// start (lease.inLog), can be known never to have started.
	// Likewise a worker holds the short lease before a start if it said
	// so in a renewal or its node says so in gossip.
	confirms, shorts := map[string]bool{}, map[string]bool{}
	for _, m := range l.s.Raft.Members() {
		confirms[m.Name], shorts[m.Name] = m.Meta.ConfirmsStarts, m.Meta.PreStartLeases
	}
	epoch, electedIndex := l.s.FSM.Elected()
	var due []*lease
	unstarted, before := map[string]bool{}, map[string]bool{}
	l.mu.Lock()
	for id, le := range l.leases {
		if !now.After(le.deadline) {
			continue
		}
		if le.onShort && !le.preStart && !shorts[le.worker] {
			// A worker of a release before short leases, never heard
			// from: it holds the whole lease, counted from the grant.
			le.onShort, le.deadline = false, le.deadline.Add(le.ttl-le.short)
			continue
		}
		due = append(due, le)
		delete(l.leases, id)
		if (le.confirming || confirms[le.worker]) && !le.started && (le.inLog || fsm.GrantedSinceElection(le.token, epoch, epoch, electedIndex)) {
			// From here on its start is refused (renew), so the
			// word given with the expiry stays true.
			l.unstarted[id], unstarted[id] = true, true
			before[id] = le.onShort
		}
	}
	l.mu.Unlock()
	for _, le := range due {
		run, att, ok := l.current(le.attempt)
		if !ok {
			continue
		}
		ttl := le.ttl
		if before[le.attempt] {
			ttl = le.short
		}
		reason := fmt.Sprintf("lease expired: no renewal from %s for %s", le.worker, ttl)
		never := unstarted[le.attempt] && att.StartedAt.IsZero()
		switch {
		case never && before[le.attempt]:
			reason = fmt.Sprintf("lease before the start expired: no renewal from %s for %s; its start was never confirmed, so the process never started", le.worker, ttl)
		case never:
			reason += "; its start was never confirmed, so the process never started"
		}
		l.expireAttempt(run, att, jobs.Lost, reason, expiry{takeover: true, neverStarted: never, beforeStart: never && before[le.attempt]})
	}
}

// expire takes an attempt's lease away through Raft; with takeover, the
// next attempt goes to another worker in the same entry.
func (l *leader) expire(run jobs.Run, att jobs.Attempt, st jobs.State, reason string, takeover bool) {
	l.expireAttempt(run, att, st, reason, expiry{takeover: takeover})
}

// expiry is what the leader says with an expiry.
type expiry struct {
	// takeover: grant the run's next attempt in the same entry.
	takeover bool
	// neverStarted: the leader's word that the attempt never started
	// (startconfirm.go); beforeStart: the lease that ran out was the
	// short one before the start (scheduler/fsm/prestart.go).
	neverStarted, beforeStart bool
}

// expireAttempt is expire, with the leader's word in x: the FSM decides
// whether the attempt then counts against the job's retries, so a
// takeover worker is named whenever the run might get another attempt.
// An expiry before the start that the FSM refuses leaves the attempt
// its whole lease.
func (l *leader) expireAttempt(run jobs.Run, att jobs.Attempt, st jobs.State, reason string, x expiry) {
	l.mu.Lock()
	delete(l.leases, att.ID)
	l.mu.Unlock()
	cmd := &replicated.ExpireCmd{Attempt: att.ID, State: st, Reason: reason, At: l.s.now(), NeverStarted: x.neverStarted, BeforeStart: x.beforeStart}
	spec, ok := l.s.FSM.Spec(run.Job)
	if x.takeover && ok && (x.neverStarted || fsm.CountedAttempts(run) < spec.Retries+1) {
		if w, err := l.chooseWorker(spec, run.ID, att.Worker); err == nil {
			cmd.Worker = w
		}
	}
	res, err := l.propose(replicated.Command{Op: replicated.OpExpire, Expire: cmd})
	if errors.Is(err, fsm.ErrPreStartLeaseHeld) {
		l.log.Warn("expiry before the start refused; the attempt keeps its whole lease", "attempt", att.ID, "err", err)
		l.mu.Lock()
		l.leases[att.ID] = newLease(run, att, spec.Lease(), l.s.Clock.Now())
		delete(l.unstarted, att.ID) // a leader may have confirmed its start: its renewals are its own again
		l.mu.Unlock()
		return
	}
	if err != nil {
		if !errors.Is(err, jobs.ErrStaleAttempt) {
			l.log.Error("expire failed", att.LogArgs("err", err)...)
		}
		return
	}
	l.log.Warn("attempt "+string(st), att.LogArgs("worker", att.Worker, "reason", reason)...)
	if next, ok := res.Run.Latest(); ok && next.Number > att.Number {
		l.log.Info("granted takeover attempt", next.LogArgs("worker", next.Worker)...)
		l.track(res.Run, *next, spec)
	}
}

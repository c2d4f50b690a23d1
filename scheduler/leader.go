package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
)

const (
	// misfireGrace is how late the latest due fire time may be and still
	// run under misfire: skip.
	misfireGrace = 2 * time.Second
	// maxEnumerate bounds how many missed fire times one pass walks.
	maxEnumerate = 100000
	// leaseTick is how often the leader looks for expired leases and due
	// retries.
	leaseTick = 100 * time.Millisecond
)

// leader is one leadership term of a node: its firing queue, the leases of
// running attempts (renewals live only here; grants, expiries and
// completions are Raft entries), retry timers and dispatches in flight.
// Everything here dies with the term.
type leader struct {
	s   *Scheduler
	ctx context.Context
	log *slog.Logger

	mu       sync.Mutex
	leases   map[string]*lease    // attempt id -> lease
	retryAt  map[string]time.Time // run id -> when its next attempt is due
	inflight map[string]bool      // attempts being dispatched
	// unstarted are the attempts being expired as never started: their
	// start is no longer confirmed (startconfirm.go).
	unstarted map[string]bool
	// electedEpoch and electedIndex are this loop's election entry's: it
	// confirms starts only while that entry is the last one applied.
	electedEpoch, electedIndex uint64
	pumping                    atomic.Bool // pumpBackfills is granting (backfill.go)
	// sender is the term's notifier, once notifyLoop made it.
	sender atomic.Pointer[notifier]

	// completions and starts wait here for their groups' entries
	// (groupcommit.go).
	completions *grouper[Completion]
	starts      *grouper[startCmd]

	// endTerm ends the loop (set by run before anything proposes); see
	// propose.
	endTerm func()
	ended   atomic.Bool

	wg sync.WaitGroup
}

// lease is the leader's in-memory view of an attempt's ownership.
type lease struct {
	attempt, run, job, worker string
	token                     jobs.Fence
	ttl                       time.Duration
	deadline                  time.Time
	// confirming: the worker confirms starts before starting; started:
	// this term confirmed the attempt's start (startconfirm.go).
	confirming, started bool
}

// newLease is att's lease of ttl, running from now.
func newLease(run jobs.Run, att jobs.Attempt, ttl time.Duration, now time.Time) *lease {
	return &lease{attempt: att.ID, run: run.ID, job: run.Job, worker: att.Worker, token: att.Token, ttl: ttl, deadline: now.Add(ttl)}
}

func newLeader(s *Scheduler, ctx context.Context) *leader {
	l := &leader{
		s: s, ctx: ctx, log: s.Logger,
		leases: map[string]*lease{}, retryAt: map[string]time.Time{}, inflight: map[string]bool{}, unstarted: map[string]bool{},
	}
	l.completions = newGrouper(completionBytes, l.commitCompletions)
	l.starts = newGrouper(startBytes, l.commitStarts)
	return l
}

// run is the leader loop: commit the election entry, recover open
// attempts, catch up on missed fire times, then fire from a min-heap of
// next fire times and keep leases until ctx ends.
func (l *leader) run() {
	defer l.wg.Wait()
	// The term's goroutines (the groupers' committers) end with it, also when
	// the loop ends on its own (an operator's restore), not only when
	// the scheduler cancels it: cancel runs before the Wait above.
	termCtx, cancel := context.WithCancel(l.ctx)
	defer cancel()
	l.ctx, l.endTerm = termCtx, cancel
	ctx, s := l.ctx, l.s
	if err := s.Raft.Barrier(ctx); err != nil {
		l.log.Warn("barrier failed; not leading", "err", err)
		return
	}
	res, err := s.applyLocalCmd(ctx, command{Op: opElected, Elected: &electedCmd{Node: s.Raft.ID(), At: s.now()}})
	if err != nil {
		l.log.Warn("could not commit election entry; not leading", "err", err)
		return
	}
	l.electedEpoch, l.electedIndex = res.Epoch, res.Index
	l.log.Info("leading", "node", s.Raft.ID(), "epoch", l.electedEpoch)
	if _, _, _, has := s.FSM.JobSet(); s.InitialJobs != nil && (!has || s.ReplaceJobs && s.FSM.JobSetInfo().Hash != jobs.HashSpecs(s.InitialJobs)) {
		if _, err := s.SetJobs(ctx, s.InitialJobs, s.InitialSource); err != nil {
			l.log.Error("could not apply the initial job set", "source", s.InitialSource, "err", err)
		} else {
			l.log.Info("applied the initial job set", "source", s.InitialSource, "jobs", len(s.InitialJobs))
		}
	}

	// Subscribe before recovering: whatever ends meanwhile is handled
	// again, which is harmless.
	feed := s.FSM.Changes()
	defer feed.Close()
	for range committers {
		l.wg.Go(func() { l.completions.run(l.ctx) })
		l.wg.Go(func() { l.starts.run(l.ctx) })
	}
	l.wg.Add(1)
	go l.notifyLoop()
	s.term.Store(l)
	defer s.term.CompareAndSwap(l, nil)
	l.recover()

	q := l.buildQueue()
	tick := time.NewTicker(leaseTick)
	defer tick.Stop()
	for {
		wait := time.Hour
		if len(q) > 0 {
			wait = max(q[0].wakeAt().Sub(s.Clock.Now()), 0)
		}
		t := s.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			l.fireDue(&q)
		case <-feed.Ready():
			chs := feed.Take()
			if restored(chs) {
				// An operator's restore replaced the state this term
				// built on: end the term; the scheduler starts a new one
				// if this node still leads (election entry, recovery,
				// catch-up), in the epoch of the restored base.
				l.log.Warn("the replicated state was restored from a snapshot: starting a new epoch")
				t.Stop()
				return
			}
			if l.onChanges(chs) {
				q = l.buildQueue()
			}
		case <-tick.C:
			l.checkLeases()
			l.checkRetries()
			l.pumpBackfills()
		}
		t.Stop()
	}
}

// fireEntry is one job in the firing queue: fire times after `after`
// have not been handled yet; next is the first of them, and fireAt is
// when it fires: next plus the job's deterministic jitter. It keeps only
// what ordering the queue needs (a set may hold 100,000 jobs); the spec
// itself is looked up when the job fires.
type fireEntry struct {
	name   string
	jitter jobs.Duration
	sched  *jobs.Schedule
	after  time.Time
	next   time.Time
	fireAt time.Time
	// lead is how long before fireAt the run is granted ahead
	// (pregrant.go); aheadTried says that was tried for next, which is
	// then granted at fireAt as without ahead.
	lead       time.Duration
	aheadTried bool
}

// wakeAt is when the firing loop next handles the entry.
func (e *fireEntry) wakeAt() time.Time {
	if e.aheadTried {
		return e.fireAt
	}
	return e.fireAt.Add(-e.lead)
}

// jitterFor is the job's jitter for scheduled time t (jobs.Spec.JitterFor).
func (e *fireEntry) jitterFor(t time.Time) time.Duration {
	s := jobs.Spec{Name: e.name, Jitter: e.jitter}
	return s.JitterFor(t)
}

func (e *fireEntry) setNext(t time.Time) {
	e.next = t
	e.fireAt = t.Add(e.jitterFor(t))
	e.aheadTried = false
}

// fireQueue is a min-heap of next fire times.
type fireQueue []*fireEntry

func (q fireQueue) Len() int           { return len(q) }
func (q fireQueue) Less(i, j int) bool { return q[i].wakeAt().Before(q[j].wakeAt()) }
func (q fireQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *fireQueue) Push(x any)        { *q = append(*q, x.(*fireEntry)) }
func (q *fireQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// buildQueue starts each job from the latest scheduled time the cluster
// handled, so the first pass catches up on what no leader fired. Jobs
// with the same schedule, time zone and daylight-saving policy share one
// parsed schedule (it is read-only): a large set repeats a few schedules
// many times.
func (l *leader) buildQueue() fireQueue {
	specs, _, _, _ := l.s.FSM.JobSet()
	now := l.s.Clock.Now()
	q := make(fireQueue, 0, len(specs))
	type schedKey struct{ exprs, tz, spring, fall string }
	parsed := map[schedKey]*jobs.Schedule{}
	for _, spec := range specs {
		if len(spec.Schedules) == 0 {
			continue // it follows other jobs (after:)
		}
		key := schedKey{strings.Join(spec.Schedules, "\x00"), spec.Timezone, spec.DST.Spring, spec.DST.Fall}
		sched, ok := parsed[key]
		if !ok {
			var err error
			if sched, err = spec.Schedule(); err != nil {
				l.log.Error("job has a bad schedule; not firing it", "job", spec.Name, "err", err)
				continue
			}
			parsed[key] = sched
		}
		after, ok := l.s.FSM.LastScheduled(spec.Name)
		if !ok || after.After(now.Add(leadFor(spec))) {
			// A time a little ahead was granted ahead (pregrant.go):
			// it is handled. One further ahead is not one of ours.
			after = now
		}
		if next := sched.Next(after); !next.IsZero() {
			e := &fireEntry{name: spec.Name, jitter: spec.Jitter, sched: sched, after: after, lead: leadFor(spec)}
			e.setNext(next)
			q = append(q, e)
		}
	}
	heap.Init(&q)
	return q
}

// maxConcurrentFires bounds how many jobs are granted at once. Grants of
// different jobs are independent, and Raft commits concurrent proposals
// in one batch (one fsync), so firing many due jobs together keeps a
// busy second from queueing behind one disk write per job.
const maxConcurrentFires = 64

// fireDue handles every job whose next fire time has come. The misfire
// policies run concurrently (a skip is an entry of its own); the grants
// they decide are collected and proposed together (fireMany).
func (l *leader) fireDue(q *fireQueue) {
	now := l.s.Clock.Now()
	var due, ahead []*fireEntry
	for q.Len() > 0 && !(*q)[0].wakeAt().After(now) {
		e := heap.Pop(q).(*fireEntry)
		if e.fireAt.After(now) {
			ahead = append(ahead, e)
		} else {
			due = append(due, e)
		}
	}
	if len(ahead) > 0 {
		l.grantAhead(ahead)
		for _, e := range ahead {
			if e.after.Before(e.next) {
				heap.Push(q, e) // granted at its fire time
				continue
			}
			if next := e.sched.Next(e.after); !next.IsZero() {
				e.setNext(next)
				heap.Push(q, e)
			}
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fires []dueFire
		skips []jobs.SkipRange
	)
	collect := func(spec jobs.Spec, at time.Time) {
		mu.Lock()
		fires = append(fires, dueFire{spec, at})
		mu.Unlock()
	}
	collectSkip := func(r jobs.SkipRange) {
		mu.Lock()
		skips = append(skips, r)
		mu.Unlock()
	}
	sem := make(chan struct{}, maxConcurrentFires)
	for _, e := range due {
		if l.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			e.after = l.handleDueInto(e, now, collect, collectSkip)
		}()
	}
	wg.Wait()
	l.skipRanges(skips)
	l.fireMany(fires)
	for _, e := range due {
		if e.after.Before(e.next) {
			e.after = e.next.Add(-time.Nanosecond) // not handled (term ending): keep it due
		}
		if next := e.sched.Next(e.after); !next.IsZero() {
			e.setNext(next)
			heap.Push(q, e)
		}
	}
}

// dueFire is a scheduled run the misfire policy decided to grant.
type dueFire struct {
	spec jobs.Spec
	at   time.Time
}

// fireMany grants scheduled runs in as few entries as it may: batches of
// up to maxBatchGrants (opGrants), each one Raft entry, proposed
// concurrently. Whatever a batch cannot take (no worker or a bad output
// key, which record a skip; a grant the FSM refused for sharing keys
// with another in its entry) goes through fire, one entry each. Workers
// are chosen as fire chooses them, from one reading of the load that
// counts each pick, so a batch spreads as single grants would.
func (l *leader) fireMany(fires []dueFire) {
	if len(fires) == 1 {
		l.fire(fires[0].spec, fires[0].at, "schedule", false)
		return
	}
	s := l.s
	members, load := s.Raft.Members(), s.FSM.OpenAttemptsByWorker()
	var (
		singles []dueFire
		batch   []grantCmd
		specs   = map[string]jobs.Spec{}
	)
	for _, d := range fires {
		if _, twice := specs[d.spec.Name]; twice {
			// A second fire time of one job (misfire: all) follows the
			// first, in order, in an entry of its own.
			singles = append(singles, d)
			continue
		}
		key, err := d.spec.OutputKey(d.at)
		worker, ok := pickWorker(members, load, d.spec, jobs.RunID(d.spec.Name, d.at), "")
		if err != nil || !ok {
			singles = append(singles, d)
			continue
		}
		load[worker]++
		specs[d.spec.Name] = d.spec
		batch = append(batch, grantCmd{Job: d.spec.Name, ScheduledAt: d.at.UTC(), Trigger: "schedule", Output: key, Worker: worker, At: s.now()})
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for len(batch) > 0 {
		n := min(len(batch), maxBatchGrants)
		chunk := batch[:n]
		batch = batch[n:]
		wg.Add(1)
		go func() {
			defer wg.Done()
			refused := l.grantBatch(chunk, specs)
			mu.Lock()
			singles = append(singles, refused...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	// The rest one entry each: jobs concurrently, each job's fire times
	// in order, as handleDue fires them.
	byJob := map[string][]dueFire{}
	var order []string
	for _, d := range singles {
		if _, ok := byJob[d.spec.Name]; !ok {
			order = append(order, d.spec.Name)
		}
		byJob[d.spec.Name] = append(byJob[d.spec.Name], d)
	}
	for _, ds := range byJob {
		slices.SortFunc(ds, func(a, b dueFire) int { return a.at.Compare(b.at) })
	}
	sem := make(chan struct{}, maxConcurrentFires)
	for _, job := range order {
		if l.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, d := range byJob[job] {
				l.fire(d.spec, d.at, "schedule", false)
			}
		}()
	}
	wg.Wait()
}

// grantBatch proposes one batch entry and tracks every attempt it
// granted; it returns the runs the FSM refused to batch, for fire. A
// batch whose outcome is unknown (leadership lost mid-apply) is left to
// the unique (job, scheduled time), as fire leaves a single grant.
func (l *leader) grantBatch(gs []grantCmd, specs map[string]jobs.Spec) (refused []dueFire) {
	if len(gs) == 1 {
		return []dueFire{{specs[gs[0].Job], gs[0].ScheduledAt}}
	}
	res, err := l.propose(command{Op: opGrants, Grants: &grantsCmd{Grants: gs}})
	if err == nil && len(res.Batch) != len(gs) {
		err = fmt.Errorf("batch of %d grants answered with %d results", len(gs), len(res.Batch))
	}
	if err != nil {
		l.log.Error("batch grant failed", "runs", len(gs), "first", jobs.RunID(gs[0].Job, gs[0].ScheduledAt), "err", err)
		return nil
	}
	var granted []Assignment
	for i, r := range res.Batch {
		g, spec := gs[i], specs[gs[i].Job]
		if errors.Is(r.Err, ErrBatchOverlap) {
			refused = append(refused, dueFire{spec, g.ScheduledAt})
			continue
		}
		l.granted(spec, g.ScheduledAt, r.Run, r.Err, len(gs), &granted)
	}
	l.dispatchAll(granted)
	return refused
}

// granted logs what the entry that proposed a grant of spec's run at
// decided (run, or err), and tracks the attempt it granted; batch is the
// number of grants the entry held. The attempt's assignment is appended
// to out, for the caller to dispatch with the others of its entry, or,
// with out nil, dispatched at once. It returns the run, or err if the
// grant failed (its outcome may then be unknown: leadership lost
// mid-apply; the unique (job, scheduled time) makes a later grant of the
// same time refuse, and a new leader recovers whatever committed).
func (l *leader) granted(spec jobs.Spec, at time.Time, run jobs.Run, err error, batch int, out *[]Assignment) (jobs.Run, error) {
	log := l.log.With("job", spec.Name, "scheduled_at", at)
	switch {
	case errors.Is(err, jobs.ErrDuplicateRun):
		log.Info("run already granted", "run", run.ID)
		return run, nil
	case err != nil:
		log.Error("grant failed", "err", err)
		return jobs.Run{}, err
	case run.State == jobs.Skipped:
		log.Info("run skipped", "run", run.ID, "reason", run.Reason)
		return run, nil
	case len(run.Attempts) == 0:
		log.Info("run waits for its group", "run", run.ID, "reason", run.Reason) // groups.go
		return run, nil
	}
	att, _ := run.Latest()
	fields := []any{"run", run.ID, "attempt", att.ID, "token", att.Token, "worker", att.Worker, "forced", run.Forced}
	if batch > 1 {
		fields = append(fields, "batch", batch)
	}
	log.Info("granted", fields...)
	if out != nil {
		*out = append(*out, l.lease(run, *att, spec))
	} else {
		l.track(run, *att, spec)
	}
	return run, nil
}

// handleDue applies the job's misfire policy to its fire times in
// (e.after, now], granting each run it decides on at once, and returns
// the last of them.
func (l *leader) handleDue(e *fireEntry, now time.Time) time.Time {
	return l.handleDueInto(e, now, func(spec jobs.Spec, at time.Time) { l.fire(spec, at, "schedule", false) }, l.skipRange)
}

// handleDueInto is handleDue, handing each run to grant to fire and each
// range of fire times to skip to skip.
func (l *leader) handleDueInto(e *fireEntry, now time.Time, fire func(jobs.Spec, time.Time), skip func(jobs.SkipRange)) time.Time {
	spec, ok := l.s.FSM.Spec(e.name)
	if !ok {
		// Gone from the set (the queue is rebuilt next): its times are
		// walked past, and nothing is recorded for them (see paused).
		spec = jobs.Spec{Name: e.name, Jitter: e.jitter}
	}
	window := spec.CatchupWindow.D()
	if window <= 0 {
		window = jobs.DefaultCatchupWindow
	}
	horizon := now.Add(-window)
	var expired jobs.SkipRange
	var due []time.Time
	last := e.after
	for t := e.next; !t.IsZero() && !t.Add(spec.JitterFor(t)).After(now) && expired.Count+len(due) < maxEnumerate; t = e.sched.Next(t) {
		last = t
		if t.Before(horizon) {
			if expired.Count == 0 {
				expired.From = t
			}
			expired.To = t
			expired.Count++
			continue
		}
		due = append(due, t)
	}
	if l.paused(spec.Name) {
		return last // an operator's pause: nothing to record per fire time
	}
	if expired.Count > 0 {
		expired.Job, expired.Reason = spec.Name, fmt.Sprintf("older than catchup_window %s", window)
		skip(expired)
	}
	if len(due) == 0 {
		return last
	}
	switch spec.Misfire {
	case jobs.MisfireAll:
		for _, t := range due {
			fire(spec, t)
		}
	case jobs.MisfireSkip:
		latest := due[len(due)-1]
		missed := due[:len(due)-1]
		if now.Sub(latest) > misfireGrace {
			missed = due
		}
		if len(missed) > 0 {
			skip(rangeOf(spec.Name, missed, "missed (misfire: skip)"))
		}
		if len(missed) < len(due) {
			fire(spec, latest)
		}
	default: // latest
		if len(due) > 1 {
			skip(rangeOf(spec.Name, due[:len(due)-1], "superseded by a later fire time (misfire: latest)"))
		}
		fire(spec, due[len(due)-1])
	}
	return last
}

func rangeOf(job string, times []time.Time, reason string) jobs.SkipRange {
	return jobs.SkipRange{Job: job, From: times[0], To: times[len(times)-1], Count: len(times), Reason: reason}
}

func (l *leader) skipRange(r jobs.SkipRange) {
	r.From, r.To = r.From.UTC(), r.To.UTC()
	if _, err := l.s.applyLocalCmd(l.ctx, command{Op: opSkipRange, SkipRange: &skipRangeCmd{SkipRange: r, At: l.s.now()}}); err != nil {
		l.log.Error("could not record skipped fire times", "job", r.Job, "count", r.Count, "err", err)
		return
	}
	l.log.Info("skipped fire times", "job", r.Job, "count", r.Count, "from", r.From, "to", r.To, "reason", r.Reason)
}

func (l *leader) paused(job string) bool {
	s, ok := l.s.FSM.Spec(job)
	return !ok || s.Paused // a job gone from the set fires no more
}

// fire proposes a grant of a run of spec for scheduled time at, and
// dispatches it if granted. Whether it may run beside the job's open runs
// (overlap), and whether (job, at) was already handled, the FSM decides
// when it applies the entry (DecideGrant): firing goroutines and triggers
// propose at once, and only the log orders them. force overrides the
// overlap policy.
func (l *leader) fire(spec jobs.Spec, at time.Time, trigger string, force bool) (jobs.Run, error) {
	s := l.s
	g := &grantCmd{Job: spec.Name, ScheduledAt: at.UTC(), Trigger: trigger, Force: force, At: s.now()}
	op := opGrant
	key, err := spec.OutputKey(at)
	switch worker, ok := l.chooseWorker(spec, jobs.RunID(spec.Name, at), ""); {
	case err != nil:
		op, g.Reason = opSkip, err.Error()
	case !ok:
		op, g.Reason = opSkip, fmt.Sprintf("no alive worker matches target %v", spec.Target)
	default:
		g.Output, g.Worker = key, worker
	}
	res, err := l.propose(command{Op: op, Grant: g})
	return l.granted(spec, at, res.Run, err, 1, nil)
}

// trigger starts a run of job now, on an operator's request.
func (l *leader) trigger(ctx context.Context, job string, force bool) (jobs.Run, error) {
	spec, ok := l.s.FSM.Spec(job)
	if !ok {
		return jobs.Run{}, fmt.Errorf("trigger %s: %w", job, jobs.ErrUnknownJob)
	}
	return l.fire(spec, l.s.Clock.Now().Truncate(time.Millisecond), "manual", force)
}

// chooseWorker picks an alive node whose tags match the job's target, the
// least loaded first, avoiding `avoid` if any other will do. Ties go by a
// hash of run and node, so load spreads without coordination.
func (l *leader) chooseWorker(spec jobs.Spec, runID, avoid string) (string, bool) {
	return pickWorker(l.s.Raft.Members(), l.s.FSM.OpenAttemptsByWorker(), spec, runID, avoid)
}

// pickWorker is chooseWorker's choice among members, given each node's
// open attempts.
func pickWorker(members []election.Member, load map[string]int, spec jobs.Spec, runID, avoid string) (string, bool) {
	type cand struct {
		name string
		load int
		tie  uint64
	}
	var cands []cand
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
		h := fnv.New64a()
		h.Write([]byte(spec.Name + "\x00" + runID + "\x00" + m.Name))
		cands = append(cands, cand{m.Name, load[m.Name], h.Sum64()})
	}
	if len(cands) > 1 && avoid != "" {
		kept := cands[:0]
		for _, c := range cands {
			if c.name != avoid {
				kept = append(kept, c)
			}
		}
		cands = kept
	}
	if len(cands) == 0 {
		return "", false
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].load != cands[j].load {
			return cands[i].load < cands[j].load
		}
		return cands[i].tie < cands[j].tie
	})
	return cands[0].name, true
}

// track starts the lease of a new attempt and dispatches it.
func (l *leader) track(run jobs.Run, att jobs.Attempt, spec jobs.Spec) {
	l.dispatch(l.lease(run, att, spec))
}

// lease starts the lease of a new attempt and returns its assignment.
func (l *leader) lease(run jobs.Run, att jobs.Attempt, spec jobs.Spec) Assignment {
	ttl := spec.LeaseTTL.D()
	if ttl <= 0 {
		ttl = jobs.DefaultLeaseTTL
	}
	l.mu.Lock()
	l.leases[att.ID] = newLease(run, att, ttl, l.s.Clock.Now())
	l.mu.Unlock()
	return Assignment{Run: run, Attempt: att, Spec: spec}
}

// dispatch delivers an assignment, retrying with the same attempt id
// (never a new attempt) until the worker takes it, the lease goes, or the
// term ends.
func (l *leader) dispatch(a Assignment) {
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
			if err == nil {
				if tries > 1 {
					l.log.Info("dispatched after retries", "attempt", a.Attempt.ID, "worker", a.Attempt.Worker, "tries", tries)
				}
				return
			}
			l.log.Warn("dispatch failed; retrying with the same attempt", "attempt", a.Attempt.ID, "worker", a.Attempt.Worker, "err", err)
			if !l.leased(a.Attempt.ID) {
				return // expired or finished meanwhile: a new attempt, if any, has its own dispatch
			}
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
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
// attempt a newer leader granted and will expire (errStaleLoop).
func (l *leader) renew(r Renewal, node string) (RenewReply, error) {
	attemptID := r.Attempt
	run, att, ok := l.current(attemptID)
	switch {
	case !ok:
		return RenewReply{Reason: fmt.Sprintf("attempt %s is not current: it ended or was superseded", attemptID)}, nil
	case att.Worker != node:
		return RenewReply{Reason: fmt.Sprintf("attempt %s belongs to %s, not %s", attemptID, att.Worker, node)}, nil
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
			return RenewReply{}, fmt.Errorf("confirm the start of %s: %w", attemptID, errStaleLoop)
		}
	}
	now := l.s.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if start && l.unstarted[attemptID] {
		return RenewReply{Reason: fmt.Sprintf("attempt %s's lease ran out before its start was confirmed; another attempt takes the run over", attemptID)}, nil
	}
	le := l.leases[attemptID]
	if le == nil {
		// Granted before this term (recovery gave it a lease) or expired
		// here a moment ago but not yet applied: recreate it.
		le = newLease(run, att, l.ttlOf(run.Job), now)
		l.leases[attemptID] = le
	}
	le.deadline = now.Add(le.ttl)
	le.confirming = le.confirming || r.Confirming
	le.started = le.started || start
	return RenewReply{Held: true, TTL: jobs.Duration(le.ttl), Started: r.Start}, nil
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

func (l *leader) ttlOf(job string) time.Duration {
	if s, ok := l.s.FSM.Spec(job); ok && s.LeaseTTL > 0 {
		return s.LeaseTTL.D()
	}
	return jobs.DefaultLeaseTTL
}

// checkLeases expires every lease whose deadline passed, granting the run's
// next attempt to another worker in the same Raft entry when allowed.
func (l *leader) checkLeases() {
	now := l.s.Clock.Now()
	// A worker confirms its starts if it said so in a renewal or its
	// node says so in gossip (one that died before its first renewal).
	// Only this term's own grants can be known never to have started.
	confirms := map[string]bool{}
	for _, m := range l.s.Raft.Members() {
		confirms[m.Name] = m.Meta.ConfirmsStarts
	}
	epoch, electedIndex := l.s.FSM.Elected()
	var due []*lease
	unstarted := map[string]bool{}
	l.mu.Lock()
	for id, le := range l.leases {
		if now.After(le.deadline) {
			due = append(due, le)
			delete(l.leases, id)
			if (le.confirming || confirms[le.worker]) && !le.started && grantedSinceElection(le.token, epoch, epoch, electedIndex) {
				// From here on its start is refused (renew), so the
				// word given with the expiry stays true.
				l.unstarted[id], unstarted[id] = true, true
			}
		}
	}
	l.mu.Unlock()
	for _, le := range due {
		run, att, ok := l.current(le.attempt)
		if !ok {
			continue
		}
		reason := fmt.Sprintf("lease expired: no renewal from %s for %s", le.worker, le.ttl)
		never := unstarted[le.attempt] && att.StartedAt.IsZero()
		if never {
			reason += "; its start was never confirmed, so the process never started"
		}
		l.expireWith(run, att, jobs.Lost, reason, true, never)
	}
}

// expire takes an attempt's lease away through Raft; with takeover, the
// next attempt goes to another worker in the same entry.
func (l *leader) expire(run jobs.Run, att jobs.Attempt, st jobs.State, reason string, takeover bool) {
	l.expireWith(run, att, st, reason, takeover, false)
}

// expireWith is expire, with the leader's word that the attempt never
// started (startconfirm.go): the FSM decides whether it then counts
// against the job's retries, so a takeover worker is named whenever the
// run might get another attempt.
func (l *leader) expireWith(run jobs.Run, att jobs.Attempt, st jobs.State, reason string, takeover, neverStarted bool) {
	l.mu.Lock()
	delete(l.leases, att.ID)
	l.mu.Unlock()
	cmd := &expireCmd{Attempt: att.ID, State: st, Reason: reason, At: l.s.now(), NeverStarted: neverStarted}
	spec, ok := l.s.FSM.Spec(run.Job)
	if takeover && ok && (neverStarted || CountedAttempts(run) < spec.Retries+1) {
		if w, ok := l.chooseWorker(spec, run.ID, att.Worker); ok {
			cmd.Worker = w
		}
	}
	res, err := l.propose(command{Op: opExpire, Expire: cmd})
	if err != nil {
		if !errors.Is(err, jobs.ErrStaleAttempt) {
			l.log.Error("expire failed", "attempt", att.ID, "err", err)
		}
		return
	}
	l.log.Warn("attempt "+string(st), "attempt", att.ID, "worker", att.Worker, "reason", reason)
	if next, ok := res.Run.Latest(); ok && next.Number > att.Number {
		l.log.Info("granted takeover attempt", "attempt", next.ID, "token", next.Token, "worker", next.Worker)
		l.track(res.Run, *next, spec)
	}
}

// onChanges acts on what the FSM applied: an ended attempt loses its
// lease, and its run, if it waits for a retry, gets a retry timer; after
// a resync (a restored snapshot, or changes dropped because this loop
// fell behind) it looks at every run again. It reports whether the job
// set changed, so the firing queue must be rebuilt.
func (l *leader) onChanges(chs []Change) (jobsChanged bool) {
	for _, ch := range chs {
		switch ch.Kind {
		case ChangeJobs:
			jobsChanged = true
		case ChangeResync, ChangeRestored:
			jobsChanged = true
			l.resync()
			l.trackFollowers()
		case ChangeGranted:
			l.trackFollower(ch)
		case ChangeAdmitted:
			if run, ok := l.s.FSM.Run(ch.Run); ok {
				l.scheduleRetry(run) // grants its first attempt (groups.go)
			}
		case ChangeEnded:
			l.mu.Lock()
			delete(l.leases, ch.Attempt)
			delete(l.unstarted, ch.Attempt)
			l.mu.Unlock()
			if run, ok := l.s.FSM.Run(ch.Run); ok {
				l.scheduleRetry(run)
			}
		}
	}
	return jobsChanged
}

// restored reports whether chs hold an operator's restore.
func restored(chs []Change) bool {
	for _, ch := range chs {
		if ch.Kind == ChangeRestored {
			return true
		}
	}
	return false
}

// resync drops the leases of attempts that are no longer current and sets
// the retry timer of every run that waits for one.
func (l *leader) resync() {
	l.mu.Lock()
	ids := make([]string, 0, len(l.leases))
	for id := range l.leases {
		ids = append(ids, id)
	}
	for id := range l.unstarted {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	for _, id := range ids {
		if _, _, ok := l.current(id); !ok {
			l.mu.Lock()
			delete(l.leases, id)
			delete(l.unstarted, id)
			l.mu.Unlock()
		}
	}
	l.scheduleRetries()
}

// scheduleRetry sets the retry timer of a run whose latest attempt failed
// and which has attempts left: the backoff doubles with each attempt.
func (l *leader) scheduleRetry(run jobs.Run) {
	if IsAdmitted(run) {
		l.mu.Lock()
		l.retryAt[run.ID] = l.s.Clock.Now()
		l.mu.Unlock()
		return
	}
	a, _ := run.Latest()
	if !AwaitsRetry(run) {
		return
	}
	spec, ok := l.s.FSM.Spec(run.Job)
	if !ok {
		return
	}
	backoff := spec.RetryDelay(a.Number)
	if a.Expired && a.State == jobs.Lost || a.NeverStarted {
		backoff = 0 // a takeover, or a run that never started, does not wait
	}
	l.mu.Lock()
	l.retryAt[run.ID] = a.EndedAt.Add(backoff)
	l.mu.Unlock()
}

func (l *leader) scheduleRetries() {
	for _, r := range l.s.FSM.Runs(RunFilter{}) {
		l.scheduleRetry(r)
	}
}

// checkRetries grants the next attempt of every run whose retry is due.
func (l *leader) checkRetries() {
	now := l.s.Clock.Now()
	l.mu.Lock()
	due := map[string]time.Time{}
	for id, at := range l.retryAt {
		if !at.After(now) {
			due[id] = at
			delete(l.retryAt, id)
		}
	}
	l.mu.Unlock()
	for _, id := range sortedKeys(due) {
		run, ok := l.s.FSM.Run(id)
		if !ok {
			continue
		}
		if IsAdmitted(run) {
			l.grantAdmitted(run, now)
			continue
		}
		a, _ := run.Latest()
		spec, known := l.s.FSM.Spec(run.Job)
		if !known || !AwaitsRetry(run) {
			continue
		}
		worker, ok := l.chooseWorker(spec, run.ID, a.Worker)
		if !ok {
			l.log.Warn("no worker for retry; trying again later", "run", run.ID)
			l.mu.Lock()
			l.retryAt[run.ID] = now.Add(time.Second)
			l.mu.Unlock()
			continue
		}
		res, err := l.propose(command{Op: opRetry, Retry: &retryCmd{Run: run.ID, After: a.Number, Worker: worker, At: l.s.now()}})
		if err != nil {
			if !errors.Is(err, jobs.ErrStaleAttempt) && !errors.Is(err, jobs.ErrRunFinished) {
				// The run still waits: try again, or it stays open for good.
				l.log.Error("retry failed; trying again later", "run", run.ID, "err", err)
				l.mu.Lock()
				l.retryAt[run.ID] = now.Add(time.Second)
				l.mu.Unlock()
			}
			continue
		}
		next, _ := res.Run.Latest()
		l.log.Info("retrying", "run", run.ID, "attempt", next.ID, "token", next.Token, "worker", next.Worker)
		l.track(res.Run, *next, spec)
	}
}

func sortedKeys(m map[string]time.Time) []string {
	keys := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// recover takes over what earlier leaders left: every open attempt gets a
// fresh lease from this election (as Consul and Chubby do) and is
// dispatched again if it may never have arrived (the worker ignores a
// duplicate); attempts whose worker gossip reports gone are expired at
// once; failed runs get their retry timers.
func (l *leader) recover() {
	// Only a worker gossip has seen die or leave is gone: a leader that
	// has just started may not have heard of everyone yet, and a live
	// worker's lease deserves its grace.
	gone := map[string]bool{}
	for _, m := range l.s.Raft.Members() {
		if m.State == "dead" || m.State == "left" {
			gone[m.Name] = true
		}
	}
	now := l.s.Clock.Now()
	for _, run := range l.s.FSM.OpenRuns("") {
		a, ok := run.Latest()
		if !ok || AwaitsRetry(run) {
			continue // scheduleRetries takes these
		}
		spec, known := l.s.FSM.Spec(run.Job)
		if gone[a.Worker] || !known {
			l.expire(run, *a, jobs.Lost, fmt.Sprintf("worker %s is gone (found by the new leader)", a.Worker), true)
			continue
		}
		l.mu.Lock()
		l.leases[a.ID] = newLease(run, *a, l.ttlOf(run.Job), now)
		l.mu.Unlock()
		if a.State == jobs.Pending {
			l.dispatch(Assignment{Run: run, Attempt: *a, Spec: spec})
		}
	}
	l.scheduleRetries()
}

// propose proposes c, an entry that may mint a token, in this loop's
// context. The FSM refuses it (ErrTermNotStarted) when this node leads a
// term whose election entry is not in the log: the node lost and
// regained leadership while this loop ran, so the loop belongs to a term
// it did not start. The loop then ends, and the scheduler starts a fresh
// one if the node still leads (as after a restore), which commits the
// term's election entry before it grants. The error then also says
// jobs.ErrNotLeader, so an operator's trigger is answered "retry".
func (l *leader) propose(c command) (applyResult, error) {
	return l.proposeWith(l.ctx, c)
}

// proposeWith is propose for a proposal made on behalf of a caller whose
// ctx bounds it (an operator's release).
func (l *leader) proposeWith(ctx context.Context, c command) (applyResult, error) {
	res, err := l.s.applyLocalCmd(ctx, c)
	if !errors.Is(err, ErrTermNotStarted) {
		return res, err
	}
	if l.ended.CompareAndSwap(false, true) {
		l.log.Warn("this leader loop's proposal was refused: it leads a term it did not start; ending the loop so a new one starts the term", "op", c.Op, "err", err)
		l.endTerm()
	}
	return res, fmt.Errorf("%w: this node's leader loop is starting its term again; retry: %w", jobs.ErrNotLeader, err)
}

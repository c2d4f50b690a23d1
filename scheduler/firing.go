package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

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
	// paused is the spec's own paused flag when the entry was made
	// (refreshQueue); an operator's pause is not in it.
	paused bool
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

func (q fireQueue) Len() int { return len(q) }

func (q fireQueue) Less(i, j int) bool { return q[i].wakeAt().Before(q[j].wakeAt()) }

func (q fireQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }

func (q *fireQueue) Push(x any) { *q = append(*q, x.(*fireEntry)) }

func (q *fireQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// buildQueue starts each job from the latest scheduled time the cluster
// handled, so the first pass catches up on what no leader fired.
func (l *leader) buildQueue() fireQueue { return l.queueFor(nil) }

// refreshQueue brings q up to date after the job set changed. A job
// whose schedule, jitter, lead and paused flag are as its entry in q has
// them keeps that entry, and so what this term handled of it; the others
// start as buildQueue starts them: a job its file resumes starts again
// from what the cluster last handled of it, as under a new leader. The
// firing loop fires nothing while it runs, and a change to one job of
// 100,000 then costs a look-up of each name, not a copy of the set and a
// Next of every job.
func (l *leader) refreshQueue(q fireQueue) fireQueue {
	had := make(map[string]*fireEntry, len(q))
	for _, e := range q {
		had[e.name] = e
	}
	return l.queueFor(had)
}

// schedKey is what a parsed schedule depends on.
type schedKey struct{ exprs, tz, spring, fall string }

func schedKeyOf(s *jobs.Spec) schedKey {
	return schedKey{strings.Join(s.Schedules, "\x00"), s.Timezone, s.DST.Spring, s.DST.Fall}
}

// queueFor builds the queue of the replicated set, taking the entry had
// holds for a job if it is still right for it. Jobs with the same
// schedule, time zone and daylight-saving policy share one parsed
// schedule (it is read-only; l.schedules keeps them from one build to
// the next, so an entry kept is recognised by its pointer): a large set
// repeats a few schedules many times.
func (l *leader) queueFor(had map[string]*fireEntry) fireQueue {
	specs := l.s.FSM.JobSetBase().Jobs // shared: read only
	now := l.s.Clock.Now()
	prev := l.schedules
	l.schedules = map[schedKey]*jobs.Schedule{}
	q := make(fireQueue, 0, len(specs))
	// A job new to the queue counts from now, and a large set repeats a
	// few schedules (100,000 daily jobs have 1,440 times): each schedule's
	// next time from now is computed once.
	fromNow := map[*jobs.Schedule]time.Time{}
	for i := range specs {
		spec := specs[i]
		if len(spec.Schedules) == 0 {
			continue // it follows other jobs (after:)
		}
		key := schedKeyOf(spec)
		sched, ok := l.schedules[key]
		if !ok {
			if sched, ok = prev[key]; !ok {
				var err error
				if sched, err = spec.Schedule(); err != nil {
					l.log.Error("job has a bad schedule; not firing it", "job", spec.Name, "err", err)
					continue
				}
			}
			l.schedules[key] = sched
		}
		lead := worker.LeadFor(*spec)
		if e := had[spec.Name]; e != nil && e.sched == sched && e.jitter == spec.Jitter && e.lead == lead && e.paused == spec.Paused {
			q = append(q, e)
			continue
		}
		after, ok := l.s.FSM.LastScheduled(spec.Name)
		if !ok || after.After(now.Add(lead)) {
			// A time a little ahead was granted ahead (pregrant.go):
			// it is handled. One further ahead is not one of ours.
			after = now
		}
		next, known := fromNow[sched]
		switch {
		case !after.Equal(now):
			next = sched.Next(after)
		case !known:
			next = sched.Next(now)
			fromNow[sched] = next
		}
		if !next.IsZero() {
			e := &fireEntry{name: spec.Name, jitter: spec.Jitter, sched: sched, after: after, lead: lead, paused: spec.Paused}
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
	var g errgroup.Group
	g.SetLimit(maxConcurrentFires)
	for _, e := range due {
		if l.ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			e.after = l.handleDueInto(e, now, collect, collectSkip)
			return nil
		})
	}
	g.Wait()
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
// up to MaxBatchGrants (OpGrants), each one Raft entry, proposed
// concurrently. Whatever a batch cannot take (no worker or a bad output
// key, which record a skip; a grant the FSM refused for sharing keys
// with another in its entry) goes through fire, one entry each. Workers
// are chosen as fire chooses them, from one reading of the load that
// counts each pick, so a batch spreads as single grants would.
func (l *leader) fireMany(fires []dueFire) {
	s := l.s
	members, load, shun := s.Raft.Members(), s.FSM.OpenLoadByWorker(), l.shunned()
	var (
		singles []dueFire
		batch   []replicated.GrantCmd
		specs   = map[string]jobs.Spec{}
		// shed are the fire times no worker has room for, skipped
		// together in one entry.
		shed []jobs.SkipRange
	)
	defer func() { l.skipRanges(shed) }()
	for _, d := range fires {
		if _, twice := specs[d.spec.Name]; twice {
			// A second fire time of one job (misfire: all) follows the
			// first, in order, in an entry of its own.
			singles = append(singles, d)
			continue
		}
		key, err := d.spec.OutputKey(d.at)
		picked, perr := pickWorker(members, load, d.spec, jobs.RunID(d.spec.Name, d.at), "", shun)
		switch {
		case err == nil && errors.Is(perr, errWorkersFull):
			shed = append(shed, rangeOf(d.spec.Name, []time.Time{d.at}, perr.Error()))
			continue
		case err != nil || perr != nil:
			singles = append(singles, d)
			continue
		}
		load[picked] += d.spec.AttemptLoad()
		specs[d.spec.Name] = d.spec
		batch = append(batch, replicated.GrantCmd{Job: d.spec.Name, ScheduledAt: d.at.UTC(), Trigger: "schedule", Output: key, Worker: picked, At: s.now()})
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for len(batch) > 0 {
		n := min(len(batch), fsm.MaxBatchGrants)
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
	var g errgroup.Group
	g.SetLimit(maxConcurrentFires)
	for _, job := range order {
		if l.ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			for _, d := range byJob[job] {
				l.fire(d.spec, d.at, "schedule", false)
			}
			return nil
		})
	}
	g.Wait()
}

// grantBatch proposes one batch entry and tracks every attempt it
// granted; it returns the runs the FSM refused to batch, for fire. A
// batch whose outcome is unknown (leadership lost mid-apply) is left to
// the unique (job, scheduled time), as fire leaves a single grant.
func (l *leader) grantBatch(gs []replicated.GrantCmd, specs map[string]jobs.Spec) (refused []dueFire) {
	if len(gs) == 1 {
		return []dueFire{{specs[gs[0].Job], gs[0].ScheduledAt}}
	}
	res, err := l.propose(replicated.Command{Op: replicated.OpGrants, Grants: &replicated.GrantsCmd{Grants: gs}})
	if err == nil && len(res.Batch) != len(gs) {
		err = fmt.Errorf("batch of %d grants answered with %d results", len(gs), len(res.Batch))
	}
	if err != nil {
		l.log.Error("batch grant failed", "runs", len(gs), "first", jobs.RunID(gs[0].Job, gs[0].ScheduledAt), "err", err)
		return nil
	}
	granted := make([]worker.Assignment, 0, len(res.Batch))
	for i, r := range res.Batch {
		g, spec := gs[i], specs[gs[i].Job]
		if errors.Is(r.Err, fsm.ErrBatchOverlap) {
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
func (l *leader) granted(spec jobs.Spec, at time.Time, run jobs.Run, err error, batch int, out *[]worker.Assignment) (jobs.Run, error) {
	log := func() *slog.Logger { return l.log.With("job", spec.Name, "scheduled_at", at) }
	switch {
	case errors.Is(err, jobs.ErrDuplicateRun):
		log().Info("run already granted", jobs.LogRunID, run.ID)
		return run, nil
	case err != nil:
		log().Error("grant failed", "err", err)
		return jobs.Run{}, err
	case run.State == jobs.Skipped:
		log().Info("run skipped", jobs.LogRunID, run.ID, "reason", run.Reason)
		return run, nil
	case len(run.Attempts) == 0:
		log().Info("run waits for its group", jobs.LogRunID, run.ID, "reason", run.Reason) // groups.go
		return run, nil
	}
	att, _ := run.Latest()
	// The job and time inline, not by log.With: With formats a new
	// handler, for each of 1,000 grants a second.
	fields := append(make([]any, 0, 16), "job", spec.Name, "scheduled_at", at)
	fields = append(fields, att.LogArgs("worker", att.Worker, "forced", run.Forced)...)
	if batch > 1 {
		fields = append(fields, "batch", batch)
	}
	l.log.Info("granted", fields...)
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
		// Gone from the set (the next refresh drops its entry): its
		// times are walked past, and nothing is recorded for them (see
		// paused).
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
		if now.Sub(latest) > jobs.MisfireGrace {
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
	if _, err := l.s.applyLocalCmd(l.ctx, replicated.Command{Op: replicated.OpSkipRange, SkipRange: &replicated.SkipRangeCmd{SkipRange: r, At: l.s.now()}}); err != nil {
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
	g := &replicated.GrantCmd{Job: spec.Name, ScheduledAt: at.UTC(), Trigger: trigger, Force: force, At: s.now()}
	op := replicated.OpGrant
	key, err := spec.OutputKey(at)
	switch picked, perr := l.chooseWorker(spec, jobs.RunID(spec.Name, at), ""); {
	case err != nil:
		op, g.Reason = replicated.OpSkip, err.Error()
	case perr != nil:
		op, g.Reason = replicated.OpSkip, perr.Error()
	default:
		g.Output, g.Worker = key, picked
	}
	res, err := l.propose(replicated.Command{Op: op, Grant: g})
	return l.granted(spec, at, res.Run, err, 1, nil)
}

// trigger starts a run of job scheduled at the millisecond of at (when
// the request was taken), on an operator's request. A request sent again
// after its answer was lost comes with the same at: the FSM finds the run
// the first one granted (ErrDuplicateRun), which granted returns. A time
// that names no manual run (a scheduled run of that millisecond, or a
// time at or before the job's horizon, whose run is gone) is not that
// request's: the run is then scheduled at now, the leader's clock.
func (l *leader) trigger(ctx context.Context, job string, force bool, at, now time.Time) (jobs.Run, error) {
	spec, ok := l.s.FSM.Spec(job)
	if !ok {
		return jobs.Run{}, fmt.Errorf("trigger %s: %w", job, jobs.ErrUnknownJob)
	}
	at, now = at.Truncate(time.Millisecond), now.Truncate(time.Millisecond)
	run, err := l.fire(spec, at, "manual", force)
	if err == nil && run.Trigger != "manual" && !at.Equal(now) {
		return l.fire(spec, now, "manual", force)
	}
	return run, err
}

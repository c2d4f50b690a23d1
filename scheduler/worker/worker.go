package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/executor"
	"github.com/fencecron/fencecron/scheduler/faults"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/runtrace"
)

// Leader is what a worker talks to about its attempts: the scheduler,
// which answers as leader or forwards to it. Every call is idempotent by
// attempt id, and safe for concurrent use. Completions and renewals go
// in batches (batches.go says why).
type Leader interface {
	Started(ctx context.Context, attempt string, at time.Time) error
	// CompleteMany reports several attempts' completions (at most
	// MaxCompleteBatch) in one call, answering for each, in order; its
	// own error says none was recorded.
	CompleteMany(ctx context.Context, cs []replicated.Completion) ([]error, error)
	// RenewMany renews the leases of several attempts of node (at most
	// MaxRenewBatch) in one call, and confirms the starts they ask for,
	// answering for each, in order.
	RenewMany(ctx context.Context, node string, rs []Renewal) ([]RenewReply, error)
	Note(ctx context.Context, attempt, kind, node, detail string) error
}

// Lease client states of an attempt on its worker.
const (
	LeaseIdle      = "idle"
	LeaseAcquiring = "acquiring"
	LeaseHeld      = "held"
	LeaseSuspect   = "suspect"
	LeaseLost      = "lost"
)

// Worker runs attempts: it establishes the attempt's token at the store,
// confirms its lease, runs the command while renewing, publishes its
// stdout with the token, and reports.
type Worker struct {
	ID     string
	Store  fencedstore.Store
	Leader Leader
	// StoreAddr is handed to jobs as FENCECRON_STORE, and StoreCA, the
	// file of the cluster CA that store's certificate is verified with, as
	// FENCECRON_STORE_CA.
	StoreAddr, StoreCA string
	// TokenText renders an attempt's token for FENCECRON_TOKEN.
	TokenText func(a Assignment) string
	// Grace is how long a job's process group gets between SIGTERM and
	// SIGKILL when its attempt is cancelled, lost or times out.
	Grace time.Duration
	// DropEnv names variables of the worker's environment that jobs must
	// not inherit (the config's secrets).
	DropEnv []string
	// JobNice is how many nice levels below the worker its commands run
	// (node.job_nice; executor.Spawner says why); 0: at its own.
	JobNice int
	Faults  *faults.Faults
	Logger  *slog.Logger
	// Tracer, if set, makes the worker's spans of each attempt (the
	// attempt, its store calls, its process or request, its completion)
	// and hands the job TRACEPARENT; nil: tracing off.
	Tracer *runtrace.Tracer
	// TraceEnv is added to a traced job's environment beside TRACEPARENT:
	// where the node exports to (OTEL_EXPORTER_OTLP_ENDPOINT), so the
	// job's own spans (`fencecron publish`'s too) reach the same place.
	TraceEnv []string
	// Observer, if set, sees this worker's attempts (see observe.go).
	Observer Observer
	// Clock is what the worker and its lease clients wait on and read the
	// time from; nil: the system clock.
	Clock jobs.Clock

	mu     sync.Mutex
	seen   map[string]bool // attempts accepted here, running or recently finished
	recent []string        // finished attempts, oldest first, bounded by maxRecent
	active map[string]*leaseClient
	// renewQ and completeQ carry renewals and completions to the leader
	// in batches. The renewals' sender runs with ctx; the completions'
	// run until reporting ends, after the attempts are done, and senders
	// counts them.
	renewQ    *batchQueue[Renewal, RenewReply]
	completeQ *batchQueue[replicated.Completion, error]
	senders   sync.WaitGroup
	// asks times the start asks, which set how early the next ones go
	// (startlead.go).
	asks  askTimes
	live  liveOutputs // output of the attempts running here (output.go)
	spawn *executor.Spawner
	// httpClients keeps HTTP jobs' connections warm between runs.
	httpClients *executor.HTTPClients
	ctx         context.Context // runs attempts; cancelled by Close
	cancel      context.CancelFunc
	report      context.Context // reports; outlives ctx until Close gives up
	stopRp      context.CancelFunc
	wg          sync.WaitGroup
}

// Open starts accepting assignments.
func (w *Worker) Open() error {
	if w.Store == nil || w.Leader == nil {
		return errors.New("worker: store and leader are required")
	}
	if w.Logger == nil {
		w.Logger = slog.Default()
	}
	if w.Clock == nil {
		w.Clock = jobs.SystemClock{}
	}
	if w.JobNice > 0 {
		s, err := executor.NewSpawner(w.JobNice)
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		w.spawn = s
	}
	w.httpClients = &executor.HTTPClients{}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = map[string]bool{}
	w.active = map[string]*leaseClient{}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.report, w.stopRp = context.WithCancel(context.Background())
	w.renewQ = newBatchQueue(MaxRenewBatch, renewBatchTimeout, func(ctx context.Context, rs []Renewal) ([]RenewReply, error) {
		return w.Leader.RenewMany(ctx, w.ID, rs)
	})
	for range renewSenders {
		w.wg.Go(func() { w.renewQ.run(w.ctx) })
	}
	w.completeQ = newBatchQueue(MaxCompleteBatch, completeBatchTimeout, w.Leader.CompleteMany)
	w.completeQ.maxBytes, w.completeQ.size = maxCompleteBatchBytes, completionRequestBytes
	for range completeSenders {
		w.senders.Go(func() { w.completeQ.run(w.report) })
	}
	return nil
}

// Close cancels running attempts (their process groups are terminated),
// waits for them to report, and gives up reporting when ctx ends.
func (w *Worker) Close(ctx context.Context) error {
	if w.cancel == nil {
		return nil
	}
	w.cancel()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		w.httpClients.CloseIdle()
		if w.spawn != nil {
			w.spawn.Close()
			w.spawn = nil
		}
		close(done)
	}()
	select {
	case <-done:
		w.stopRp()
		w.senders.Wait()
		return nil
	case <-ctx.Done():
		w.stopRp()
		<-done
		w.senders.Wait()
		return fmt.Errorf("worker close: %w", ctx.Err())
	}
}

// LeaseStates returns the lease client state of each attempt running here.
func (w *Worker) LeaseStates() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for id, c := range w.active {
		out[id] = c.State()
	}
	return out
}

// Accept starts an attempt unless it is already running or has run here:
// a dispatch retried after a lost reply starts nothing new.
func (w *Worker) Accept(a Assignment) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil || w.ctx.Err() != nil {
		return errors.New("worker is not running")
	}
	if a.Attempt.Worker != w.ID {
		return fmt.Errorf("attempt %s is for %s, not %s", a.Attempt.ID, a.Attempt.Worker, w.ID)
	}
	if w.seen[a.Attempt.ID] {
		return nil
	}
	w.seen[a.Attempt.ID] = true
	accepted := w.clock().Now().UTC()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		var span *runtrace.Span
		if w.Tracer != nil {
			span = w.Tracer.Attempt(w.ctx, a.Run, a.Attempt, a.TraceParent)
		}
		log := attemptLog(w.Logger, a, span)
		c := w.runAttempt(&a, span, log)
		c.AcceptedAt = accepted
		w.observer().AttemptFinished(jobOf(a), c)
		var done *runtrace.Span
		if w.Tracer != nil {
			st := attribute.String(runtrace.AttrState, string(c.State))
			span.SetAttributes(st)
			done = w.Tracer.Start(span.Context(w.ctx), runtrace.SpanCompleted, trace.SpanKindClient, st)
		}
		w.reportCompletion(c, log)
		done.End(nil)
		span.End(completionErr(c))
		w.forget(a.Attempt.ID)
	}()
	return nil
}

// maxRecent bounds how many finished attempt ids a worker remembers to
// refuse a late duplicate dispatch.
const maxRecent = 4096

// startReportDelay is how long a process runs before its worker reports
// the start to the leader (a Raft entry, so the run shows as running).
// A process that ends sooner is recorded as started by its completion
// alone, which carries the start time: most cron jobs at a high rate are
// short, and the start entry was a third of their log. The lease does
// not wait for it: the leader counts it from the dispatch.
const startReportDelay = time.Second

func (w *Worker) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.active, id)
	w.live.stop(id)
	w.recent = append(w.recent, id)
	if len(w.recent) > maxRecent {
		delete(w.seen, w.recent[0])
		w.recent = w.recent[1:]
	}
}

// attemptLog is the logger of an attempt's lines: its run, itself, its
// token, and its span's ids when tracing is on.
func attemptLog(l *slog.Logger, a Assignment, span *runtrace.Span) *slog.Logger {
	if span == nil {
		return l.With(a.Attempt.LogArgs()...)
	}
	tid, sid := span.IDs()
	return l.With(a.Attempt.LogArgs(runtrace.LogTraceID, tid, runtrace.LogSpanID, sid)...)
}

// completionErr is why an attempt did not succeed, for its span.
func completionErr(c replicated.Completion) error {
	if c.State == jobs.Succeeded {
		return nil
	}
	if c.Error != "" {
		return errors.New(c.Error)
	}
	return errors.New(string(c.State))
}

// storeSpan starts the span of a store call (tracing on), under span.
func (w *Worker) storeSpan(span *runtrace.Span, name, key string, tok jobs.Fence) *runtrace.Span {
	if w.Tracer == nil {
		return nil
	}
	return w.Tracer.Start(span.Context(w.ctx), name, trace.SpanKindClient,
		attribute.String(runtrace.AttrKey, key), attribute.String(runtrace.AttrToken, tok.String()))
}

// endStoreSpan ends a store call's span with the store's answer: a
// refusal is an error event carrying both tokens.
func endStoreSpan(s *runtrace.Span, tok jobs.Fence, res fencedstore.Result, err error) {
	if s == nil {
		return
	}
	switch {
	case errors.Is(err, fencedstore.ErrStaleOwner):
		s.Refused(string(fencedstore.StaleOwner), tok, res.Greatest)
		err = nil
	case errors.Is(err, fencedstore.ErrExpired):
		s.Refused(string(fencedstore.Expired), tok, res.Greatest)
		err = nil
	case err == nil && res.Outcome != "":
		s.SetAttributes(attribute.String(runtrace.AttrOutcome, string(res.Outcome)))
	}
	s.End(err)
}

// runAttempt is the life of an attempt on the worker, DESIGN.md steps
// 4-7; span is its span (nil: tracing off), log its logger.
func (w *Worker) runAttempt(a *Assignment, span *runtrace.Span, log *slog.Logger) replicated.Completion {
	tok := a.Attempt.Token
	expires := a.TokenExpires()
	done := func(st jobs.State, outcome, format string, args ...any) replicated.Completion {
		c := replicated.Completion{Attempt: a.Attempt.ID, Node: w.ID, State: st, StoreOutcome: outcome, EndedAt: w.clock().Now().UTC()}
		if format != "" {
			c.Error = fmt.Sprintf(format, args...)
		}
		return c
	}
	ttl := a.Spec.Lease()
	lc := &leaseClient{w: w, attempt: a.Attempt.ID, ttl: ttl, state: LeaseAcquiring, lost: make(chan struct{}), log: log}
	// An attempt that starts at once has its start confirmed with its
	// lease; one granted ahead asks again just before its fire time, and
	// holds the short lease until it starts.
	now := w.clock().Now()
	lead := w.asks.lead(now)
	lc.start = !a.StartAt().After(now.Add(lead))
	if !lc.start {
		lc.short = a.Spec.PreStartLease()
		lc.startAsk = a.StartAt().Add(-lead)
	}
	w.mu.Lock()
	w.active[a.Attempt.ID] = lc
	w.mu.Unlock()

	// ACQUIRING: shut out every older attempt at the store and confirm
	// the lease with the leader, both before doing anything. The two are
	// independent, so they go out together. A run granted ahead has its
	// lease confirmed with its start, if the grant's short lease lasts
	// until then.
	// established is closed once the store took the token: a start is
	// asked for only after that.
	established := make(chan struct{})
	withStart := lc.confirmAtStart(a.Attempt.GrantedAt, w.clock().Now())
	held, settle := lc.confirm(w.ctx, withStart, established)
	// An HTTP request is built (its token rendered) while the lease is
	// confirmed: it needs nothing of the lease, and built before the
	// renewals start it is ready however late this goroutine runs next to
	// them (a test's fake clock jumps to their first timer), yet costs the
	// confirmed lease nothing, as it would between the confirmation and
	// the first renewal. Its target is connected while the run waits for
	// its fire time, below: before the lease is confirmed if that waits
	// for the start, once it is held otherwise.
	var prepared *executor.PreparedHTTP
	if a.Spec.HTTP != nil {
		prepared = w.prepareHTTP(*a)
	}
	// The connecting ends in time for the start to be confirmed.
	warm := func(ctx context.Context) {
		if left := lc.startAsk.Sub(w.clock().Now()) - startConfirmLead; prepared != nil && left > 0 {
			wctx, cancel := context.WithTimeout(ctx, left)
			prepared.Warm(wctx)
			cancel()
		}
	}
	if key := a.Run.Output; key != "" {
		es := w.storeSpan(span, runtrace.SpanEstablish, key, tok)
		res, err := w.establish(es.Context(w.ctx), fencedstore.EstablishRequest{Key: key, Token: tok, Attempt: a.Attempt.ID, Job: a.Run.Job, Expires: expires}, lc)
		endStoreSpan(es, tok, res, err)
		switch {
		case errors.Is(err, fencedstore.ErrStaleOwner) && !res.Floor.IsZero():
			settle()
			log.Warn("fenced before start: a forced release revoked the token", "key", key, "floor", res.Floor)
			return done(jobs.Fenced, string(fencedstore.StaleOwner), "establish %s refused: a forced release revoked this attempt's token %s (its job's floor is %s)", key, tok, res.Floor)
		case errors.Is(err, fencedstore.ErrStaleOwner):
			settle()
			log.Warn("fenced before start: the store holds a newer token", "key", key, "greatest", res.Greatest)
			return done(jobs.Fenced, string(fencedstore.StaleOwner), "establish %s refused: store holds newer token %s", key, res.Greatest)
		case errors.Is(err, fencedstore.ErrExpired):
			// Nothing ran: the attempt is over like one whose lease
			// ended, and its run may get a new attempt with a new token.
			settle()
			log.Warn("expired before start: the store refused the token as expired", "key", key, "expires", expires)
			return done(jobs.Lost, string(fencedstore.Expired), "establish %s refused as expired: token %s expired at %s, before the attempt could start", key, tok, expires.UTC().Format(time.RFC3339))
		case err != nil && w.ctx.Err() != nil:
			// The worker is stopping (SIGTERM) while it establishes:
			// nothing ran, so on its word the run gets another attempt
			// elsewhere without using a retry, as when it stops while
			// waiting for the fire time.
			settle()
			c := done(jobs.Lost, "", "worker shutting down before the start (establish %s: %v); the process never started", key, err)
			c.NeverStarted = true
			return c
		case err != nil:
			settle()
			return done(jobs.Failed, "", "establish %s: %v", key, err)
		}
	}
	close(established)
	if withStart {
		warm(w.ctx)
	}
	if !<-held {
		// Nothing ran: on the worker's word, the run is taken over
		// without using a retry.
		c := done(jobs.Lost, "", "lease not confirmed: %s; the process never started", lc.reason())
		if !lc.isLost() { // it waited to ask with the start
			c.Error = "worker shutting down before the fire time; the process never started"
		}
		c.NeverStarted = true
		return c
	}

	// HELD: run the command while the lease is renewed; LOST cancels it.
	runCtx, cancelRun := context.WithCancel(w.ctx)
	defer cancelRun()
	renewDone := make(chan struct{})
	keep := lc.startKeep()
	go func() {
		defer close(renewDone)
		keep(runCtx, cancelRun)
	}()
	stopRenewing := func() { cancelRun(); <-renewDone }
	defer stopRenewing()
	if !withStart {
		warm(runCtx)
	}
	// The job's span (its request or process) has its ids chosen now,
	// so that its traceparent is in the request before the fire time and
	// nothing of the span is made between that time and the start.
	plan := w.Tracer.Plan(span.Context(w.ctx))
	if tp := plan.TraceParent(); tp != "" && prepared != nil && prepared.Header() != nil {
		prepared.Header().Set("traceparent", tp)
	}
	// A run granted ahead starts at its fire time, not before.
	if err := w.awaitStart(runCtx, a.StartAt(), lc); err != nil {
		if lc.isLost() {
			// The worker's word that nothing ran: the run is taken over
			// without using a retry (if the leader has not already).
			c := done(jobs.Lost, "", "lease lost before the start: %s; the process never started", lc.reason())
			c.NeverStarted = true
			return c
		}
		// Nothing ran: lost, as if the worker had died, and on the
		// worker's word never started, so the run gets another attempt
		// elsewhere without using a retry (a leaving node is chosen for
		// none).
		c := done(jobs.Lost, "", "worker shutting down before the fire time; the process never started")
		c.NeverStarted = true
		return c
	}
	// The start time is taken once the process runs, not when it was
	// asked for: a start can wait for a CPU to fork on, and a lateness
	// measured before that wait would hide it. An exec that fails has the
	// time the start was asked for.
	var (
		started  time.Time
		markedAt time.Time  // the wall clock when the start was marked
		reportAt jobs.Timer // set once the start is marked
		asked    = w.clock().Now().UTC()
		exited   = make(chan struct{})
	)
	markStart := func(at time.Time) {
		started = at
		// Reporting the start is for the record; it must not delay the work.
		w.observeStart(*a, at)
		// The start is reported only if the process still runs
		// startReportDelay after it started: a short job's completion
		// carries its start time, so it costs one Raft entry instead of two.
		t := w.clock().NewTimer(min(startReportDelay, ttl/3))
		reportAt = t
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			select {
			case <-exited:
				return
			case <-runCtx.Done():
				return
			case <-t.C():
			}
			if err := w.Leader.Started(w.ctx, a.Attempt.ID, at); err != nil {
				log.Warn("could not report start", "err", err)
			}
		}()
	}
	out := w.live.start(a.Attempt.ID)
	var res executor.Result
	if a.Spec.HTTP != nil {
		markStart(asked)
		res = prepared.Send(runCtx)
		// The response body, for the live view and the record's tail.
		out.stdout.Write(res.Stdout)
	} else {
		res = executor.Run(runCtx, executor.Request{
			Argv:      a.Spec.Argv(),
			Env:       w.env(*a, plan.TraceParent()),
			Dir:       a.Spec.Dir,
			Timeout:   a.Spec.Timeout.D(),
			MaxOutput: a.Spec.MaxOutputBytes,
			Grace:     w.Grace,
			DropEnv:   w.DropEnv,
			Stdout:    out.stdout,
			Stderr:    out.stderr,
			Spawner:   w.spawn,
			OnStart: func(int) {
				markedAt = time.Now()
				markStart(w.clock().Now().UTC())
			},
		})
	}
	if reportAt == nil { // the exec failed
		markStart(asked)
	}
	close(exited)
	reportAt.Stop()
	out.exited()
	c := replicated.Completion{Attempt: a.Attempt.ID, Node: w.ID, Signal: res.Signal, StderrTail: res.StderrTail, StartedAt: started, EndedAt: res.Ended.UTC()}
	if end, ok := endOf(started, markedAt, res); ok {
		c.EndedAt = end
	}
	if res.Err == nil && res.Signal == "" && a.Spec.HTTP == nil {
		code := res.ExitCode
		c.ExitCode = &code
	}
	if a.Spec.HTTP != nil {
		c.HTTPStatus, c.ResponseBytes = res.Status, int64(len(res.Stdout))
	}
	switch {
	case lc.isLost():
		c.State, c.Error = jobs.Lost, "lease lost: "+lc.reason()+"; the process group was killed"
	case res.Err != nil:
		c.State, c.Error = jobs.Failed, res.Err.Error()
	case res.TimedOut:
		c.State, c.Error = jobs.TimedOut, fmt.Sprintf("timed out after %s", a.Spec.Timeout)
	case res.Cancelled:
		c.State, c.Error = jobs.Cancelled, "cancelled: worker shutting down"
	case res.OutputTruncated:
		c.State, c.Error = jobs.Failed, fmt.Sprintf("output larger than %d bytes; not published", a.Spec.MaxOutputBytes)
	case res.ExitCode != 0:
		c.State, c.Error = jobs.Failed, fmt.Sprintf("exit code %d", res.ExitCode)
	default:
		c.State = jobs.Succeeded
	}
	if plan != nil {
		name := runtrace.SpanProcess
		if a.Spec.HTTP != nil {
			name = runtrace.SpanHTTP
		}
		ps := plan.Start(name, trace.SpanKindClient, asked, attribute.String(runtrace.AttrToken, tok.String()))
		if a.Spec.HTTP != nil {
			ps.SetAttributes(attribute.Int(runtrace.AttrHTTPStatus, res.Status))
		} else if c.ExitCode != nil {
			ps.SetAttributes(attribute.Int(runtrace.AttrExitCode, *c.ExitCode))
		}
		ps.End(completionErr(c))
	}
	// The record keeps stdout's tail unless the store gets all of it.
	c.StdoutTail = out.stdout.tail(StdoutTailBytes)
	if c.State != jobs.Succeeded || a.Run.Output == "" {
		return c
	}

	// Nothing between here and the store's check may trust the lease: a
	// pause can come at any instant. The store decides.
	if faults.StopBeforePublish(w.Faults, a.Attempt.Number) {
		log.Warn("fault injection: resumed after stopping before publish")
	}
	pubSpan := w.storeSpan(span, runtrace.SpanPublish, a.Run.Output, tok)
	pub, err := w.publish(pubSpan.Context(w.ctx), fencedstore.PublishRequest{Key: a.Run.Output, Token: tok, Attempt: a.Attempt.ID, Job: a.Run.Job, Body: res.Stdout, Expires: expires})
	endStoreSpan(pubSpan, tok, pub, err)
	c.StoreOutcome, c.StoreVersion = string(pub.Outcome), pub.Version
	switch {
	case errors.Is(err, fencedstore.ErrStaleOwner) && !pub.Floor.IsZero():
		c.State, c.Error = jobs.Fenced, fmt.Sprintf("publish %s refused as stale_owner: a forced release revoked this attempt's token %s (its job's floor is %s); nothing was written", a.Run.Output, tok, pub.Floor)
		log.Warn("publish refused: the token was revoked", "key", a.Run.Output, "floor", pub.Floor)
	case errors.Is(err, fencedstore.ErrStaleOwner):
		c.State, c.Error = jobs.Fenced, fmt.Sprintf("publish %s refused as stale_owner: the store holds newer token %s, this attempt has %s", a.Run.Output, pub.Greatest, tok)
		log.Warn("publish refused as stale", "key", a.Run.Output, "greatest", pub.Greatest)
	case errors.Is(err, fencedstore.ErrExpired):
		c.State, c.Error = jobs.Fenced, fmt.Sprintf("publish %s refused as expired: this attempt's token %s expired at %s (granted %s + timeout %s + lease %s + margin %s); nothing was written",
			a.Run.Output, tok, expires.UTC().Format(time.RFC3339), a.Attempt.GrantedAt.UTC().Format(time.RFC3339), a.Spec.Timeout, a.Spec.LeaseTTL, jobs.TokenExpiryMargin)
		log.Warn("publish refused as expired", "key", a.Run.Output, "expires", expires)
	case errors.Is(err, fencedstore.ErrConflict):
		c.State, c.Error = jobs.Failed, fmt.Sprintf("publish %s: version conflict", a.Run.Output)
	case err != nil:
		c.State, c.Error = jobs.Failed, fmt.Sprintf("publish %s: %v", a.Run.Output, err)
	default:
		c.StdoutTail = ""
		log.Info("published", "key", a.Run.Output, "version", pub.Version)
	}
	return c
}

// awaitStart returns when the attempt may start: at `at` (zero: now),
// with its start confirmed by a leader (asked for at lc.startAsk, or at
// once if that is zero, and again until one answers) and its lease HELD and
// confirmed within the TTL in force at that instant (beginWork: the short
// one, for an attempt granted ahead). A lease that ran down meanwhile
// (the worker was paused, or no leader confirmed a renewal) is LOST and
// the attempt never starts; a SUSPECT one waits
// for a renewal or its loss, as it would to start any other unit of
// work. It returns ctx's error, or errLeaseLost.
func (w *Worker) awaitStart(ctx context.Context, at time.Time, lc *leaseClient) error {
	clock := w.clock()
	waitUntil := func(t time.Time) {
		if d := t.Sub(clock.Now()); d > 0 {
			t := clock.NewTimer(d)
			select {
			case <-ctx.Done():
			case <-lc.lost:
			case <-t.C():
			}
			t.Stop()
		}
	}
	waitUntil(lc.startAsk)
	// Asked again soon after a failure: a leader that died is replaced
	// within a second or two, and the run waits for the new one.
	backoff := 50 * time.Millisecond
	for !lc.askStart(ctx) {
		lc.evaluate(clock.Now())
		if lc.isLost() {
			return errLeaseLost
		}
		if !jobs.Sleep(ctx, clock, backoff) {
			if lc.isLost() {
				return errLeaseLost
			}
			return ctx.Err()
		}
		backoff = min(2*backoff, 400*time.Millisecond)
	}
	waitUntil(at)
	checkEvery := max(lc.currentTTL()/20, 10*time.Millisecond)
	for {
		now := clock.Now()
		lc.evaluate(now)
		if lc.State() == LeaseLost {
			return errLeaseLost
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if lc.beginWork(now) {
			return nil
		}
		if !jobs.Sleep(ctx, clock, checkEvery) {
			if lc.isLost() {
				return errLeaseLost
			}
			return ctx.Err()
		}
	}
}

// errLeaseLost is awaitStart's answer when the lease was lost first.
var errLeaseLost = errors.New("lease lost")

// establish calls the store, retrying failures that are not decisions
// while the lease may still be valid.
func (w *Worker) establish(ctx context.Context, req fencedstore.EstablishRequest, lc *leaseClient) (fencedstore.Result, error) {
	return retryStore(ctx, w.clock(), lc.ttl, func(ctx context.Context) (fencedstore.Result, error) {
		return w.Store.Establish(ctx, req)
	})
}

// publishRetryWindow bounds the worker's retries of a publish the store
// did not decide (jobs.TokenExpiryMargin covers it).
const publishRetryWindow = 30 * time.Second

func (w *Worker) publish(ctx context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	return retryStore(ctx, w.clock(), publishRetryWindow, func(ctx context.Context) (fencedstore.Result, error) {
		return w.Store.Publish(ctx, req)
	})
}

// retryStore retries a store call while it fails without a decision (the
// store unreachable), for at most `within`. Decisions (stale_owner,
// conflict, expired: an expired token stays expired) and bad input are
// returned at once; a publish retried after a lost reply is idempotent.
func retryStore(ctx context.Context, clock jobs.Clock, within time.Duration, call func(context.Context) (fencedstore.Result, error)) (fencedstore.Result, error) {
	deadline := clock.Now().Add(within)
	backoff := 100 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := call(cctx)
		cancel()
		if err == nil || fencedstore.IsDecision(err) ||
			errors.Is(err, fencedstore.ErrInvalidKey) || errors.Is(err, fencedstore.ErrBadToken) || errors.Is(err, fencedstore.ErrTooLarge) ||
			clock.Now().Add(backoff).After(deadline) || ctx.Err() != nil {
			return res, err
		}
		if !jobs.Sleep(ctx, clock, backoff) {
			return res, err
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// clock returns the worker's Clock, or the system clock before Open.
func (w *Worker) clock() jobs.Clock {
	if w.Clock == nil {
		return jobs.SystemClock{}
	}
	return w.Clock
}

// env is the fence environment a job's process sees.
func (w *Worker) env(a Assignment, traceparent string) []string {
	env := []string{
		"FENCECRON_EPOCH=" + strconv.FormatUint(a.Attempt.Token.Epoch, 10),
		"FENCECRON_SEQ=" + strconv.FormatUint(a.Attempt.Token.Seq, 10),
		"FENCECRON_RUN_ID=" + a.Run.ID,
		"FENCECRON_ATTEMPT=" + a.Attempt.ID,
		"FENCECRON_JOB=" + a.Run.Job,
		"FENCECRON_SCHEDULED_AT=" + a.Run.ScheduledAt.UTC().Format(time.RFC3339),
		"FENCECRON_OUTPUT=" + a.Run.Output,
		"FENCECRON_STORE=" + w.StoreAddr,
		"FENCECRON_STORE_CA=" + w.StoreCA,
		"FENCECRON_NODE=" + w.ID,
	}
	if ns := a.Spec.NamespaceName(); ns != jobs.DefaultNamespace {
		// The CLI reads job names in it (client commands' -namespace).
		env = append(env, "FENCECRON_NAMESPACE="+ns)
	}
	if w.TokenText != nil {
		env = append(env, "FENCECRON_TOKEN="+w.TokenText(a))
	}
	if traceparent != "" {
		env = append(env, "TRACEPARENT="+traceparent)
		env = append(env, w.TraceEnv...)
	}
	env = append(env, binEnv()...)
	for k, v := range a.Spec.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// binEnv lets a job run `fencecron publish` without fencecron on its
// PATH: FENCECRON_BIN, and PATH with the binary's directory first. They
// are the same for every run (the node's binary and PATH do not change
// while it runs), so they are built once, not with a readlink and a PATH
// lookup per run; nothing if the binary's path cannot be read.
var binEnv = sync.OnceValue(func() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{"FENCECRON_BIN=" + exe, "PATH=" + filepath.Dir(exe) + string(os.PathListSeparator) + os.Getenv("PATH")}
})

// reportCompletion reports c until the leader has it or the worker gives
// up at Close; log names the attempt.
func (w *Worker) reportCompletion(c replicated.Completion, log *slog.Logger) {
	backoff := 100 * time.Millisecond
	for {
		err := w.complete(c)
		if err == nil {
			log.Info("attempt finished", "state", c.State, "store", c.StoreOutcome, "error", c.Error)
			return
		}
		if errors.Is(err, jobs.ErrNotFound) || errors.Is(err, jobs.ErrInvalidConfig) {
			log.Error("completion refused", "err", err)
			return
		}
		log.Warn("could not report completion; retrying", "err", err, "in", backoff)
		if !jobs.Sleep(w.report, w.clock(), backoff) {
			log.Error("gave up reporting completion", "state", c.State)
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// endOf is when an attempt's work ended, on the worker's clock: its
// recorded start plus the time from the wall-clock mark of that start
// (markedAt; zero for an HTTP request) to the executor's end. The
// executor's own timing of a process begins before the exec, which on a
// busy machine can take hundreds of milliseconds: added to a start taken
// after it, that would put the end after the real one, and the record
// would show two runs of a concurrency group overlapping that never did.
// An HTTP request's start is marked as it is sent, as the executor times
// it.
func endOf(started, markedAt time.Time, res executor.Result) (time.Time, bool) {
	switch {
	case started.IsZero():
		return time.Time{}, false
	case !markedAt.IsZero() && res.Ended.After(markedAt):
		return started.Add(res.Ended.Sub(markedAt)), true
	case markedAt.IsZero() && res.Duration() > 0:
		return started.Add(res.Duration()), true
	}
	return time.Time{}, false
}

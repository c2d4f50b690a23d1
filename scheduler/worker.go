package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/executor"
)

// Reporter is where a worker reports on its attempts (the leader, directly
// or forwarded). Both calls are idempotent by attempt id.
type Reporter interface {
	Started(ctx context.Context, attempt string, at time.Time) error
	Complete(ctx context.Context, c Completion) error
}

// Worker runs attempts: it establishes the attempt's token at the store,
// runs the command, publishes its stdout with the token, and reports.
type Worker struct {
	ID       string
	Store    fencedstore.Store
	Reporter Reporter
	// StoreAddr is handed to jobs as FENCECRON_STORE.
	StoreAddr string
	// TokenText renders an attempt's token for FENCECRON_TOKEN.
	TokenText func(a Assignment) string
	// Grace is how long a job's process group gets between SIGTERM and
	// SIGKILL when its attempt is cancelled or times out.
	Grace  time.Duration
	Logger *slog.Logger

	mu      sync.Mutex
	seen    map[string]bool // attempts accepted here, running or recently finished
	recent  []string        // finished attempts, oldest first, bounded by maxRecent
	ctx     context.Context // runs attempts; cancelled by Close
	cancel  context.CancelFunc
	report  context.Context // reports; outlives ctx until Close gives up
	stopRep context.CancelFunc
	wg      sync.WaitGroup
}

// Open starts accepting assignments.
func (w *Worker) Open() error {
	if w.Store == nil || w.Reporter == nil {
		return errors.New("worker: store and reporter are required")
	}
	if w.Logger == nil {
		w.Logger = slog.Default()
	}
	w.seen = map[string]bool{}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.report, w.stopRep = context.WithCancel(context.Background())
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
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		w.stopRep()
		return nil
	case <-ctx.Done():
		w.stopRep()
		<-done
		return fmt.Errorf("worker close: %w", ctx.Err())
	}
}

// Dispatch implements Dispatcher for a worker in the same process.
func (w *Worker) Dispatch(ctx context.Context, worker string, a Assignment) error {
	if worker != w.ID {
		return fmt.Errorf("dispatch to %s: no route from %s", worker, w.ID)
	}
	return w.Accept(a)
}

// Accept starts an attempt unless it is already running or has run here.
func (w *Worker) Accept(a Assignment) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return errors.New("worker is shutting down")
	}
	if w.seen[a.Attempt.ID] {
		return nil
	}
	w.seen[a.Attempt.ID] = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		c := w.runAttempt(a)
		w.reportCompletion(c)
		w.forget(a.Attempt.ID)
	}()
	return nil
}

// maxRecent bounds how many finished attempt ids a worker remembers to
// refuse a late duplicate dispatch.
const maxRecent = 4096

func (w *Worker) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recent = append(w.recent, id)
	if len(w.recent) > maxRecent {
		delete(w.seen, w.recent[0])
		w.recent = w.recent[1:]
	}
}

// runAttempt is the life of an attempt on the worker, DESIGN.md steps 4-7.
func (w *Worker) runAttempt(a Assignment) Completion {
	log := w.Logger.With("attempt", a.Attempt.ID, "token", a.Attempt.Token)
	tok := fencedstore.Token{Epoch: a.Attempt.Token.Epoch, Seq: a.Attempt.Token.Seq}
	done := func(st jobs.State, format string, args ...any) Completion {
		c := Completion{Attempt: a.Attempt.ID, State: st, EndedAt: time.Now().UTC()}
		if format != "" {
			c.Error = fmt.Sprintf(format, args...)
		}
		return c
	}

	// Shut out every older attempt before doing anything.
	if key := a.Run.Output; key != "" {
		res, err := w.Store.Establish(w.ctx, key, tok, a.Attempt.ID)
		switch {
		case errors.Is(err, fencedstore.ErrStaleOwner):
			log.Warn("fenced before start: the store holds a newer token", "key", key, "greatest", res.Greatest)
			c := done(jobs.Fenced, "establish %s: store holds newer token %s", key, res.Greatest)
			c.StoreOutcome = string(fencedstore.StaleOwner)
			return c
		case err != nil:
			return done(jobs.Failed, "establish %s: %v", key, err)
		}
	}
	started := time.Now().UTC()
	if err := w.Reporter.Started(w.ctx, a.Attempt.ID, started); err != nil {
		log.Warn("could not report start", "err", err)
	}

	res := executor.Run(w.ctx, executor.Request{
		Argv:      a.Spec.Argv(),
		Env:       w.env(a),
		Dir:       a.Spec.Dir,
		Timeout:   a.Spec.Timeout.D(),
		MaxOutput: a.Spec.MaxOutputBytes,
		Grace:     w.Grace,
	})
	c := Completion{Attempt: a.Attempt.ID, Signal: res.Signal, StderrTail: res.StderrTail, StartedAt: started, EndedAt: res.Ended.UTC()}
	if res.Err == nil && res.Signal == "" {
		code := res.ExitCode
		c.ExitCode = &code
	}
	switch {
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
	if c.State != jobs.Succeeded || a.Run.Output == "" {
		return c
	}

	pub, err := w.Store.Publish(w.ctx, fencedstore.PublishRequest{Key: a.Run.Output, Token: tok, Attempt: a.Attempt.ID, Body: res.Stdout})
	c.StoreOutcome, c.StoreVersion = string(pub.Outcome), pub.Version
	switch {
	case errors.Is(err, fencedstore.ErrStaleOwner):
		c.State, c.Error = jobs.Fenced, fmt.Sprintf("publish %s refused: store holds newer token %s", a.Run.Output, pub.Greatest)
		log.Warn("publish refused as stale", "key", a.Run.Output, "greatest", pub.Greatest)
	case errors.Is(err, fencedstore.ErrConflict):
		c.State, c.Error = jobs.Failed, fmt.Sprintf("publish %s: version conflict", a.Run.Output)
	case err != nil:
		c.State, c.Error = jobs.Failed, fmt.Sprintf("publish %s: %v", a.Run.Output, err)
	default:
		log.Info("published", "key", a.Run.Output, "version", pub.Version)
	}
	return c
}

// env is the fence environment a job's process sees.
func (w *Worker) env(a Assignment) []string {
	env := []string{
		"FENCECRON_EPOCH=" + strconv.FormatUint(a.Attempt.Token.Epoch, 10),
		"FENCECRON_SEQ=" + strconv.FormatUint(a.Attempt.Token.Seq, 10),
		"FENCECRON_RUN_ID=" + a.Run.ID,
		"FENCECRON_ATTEMPT=" + a.Attempt.ID,
		"FENCECRON_JOB=" + a.Run.Job,
		"FENCECRON_SCHEDULED_AT=" + a.Run.ScheduledAt.UTC().Format(time.RFC3339),
		"FENCECRON_OUTPUT=" + a.Run.Output,
		"FENCECRON_STORE=" + w.StoreAddr,
	}
	if w.TokenText != nil {
		env = append(env, "FENCECRON_TOKEN="+w.TokenText(a))
	}
	for k, v := range a.Spec.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// reportCompletion reports c until the leader has it or the worker gives
// up at Close.
func (w *Worker) reportCompletion(c Completion) {
	backoff := 100 * time.Millisecond
	for {
		err := w.Reporter.Complete(w.report, c)
		if err == nil {
			w.Logger.Info("attempt finished", "attempt", c.Attempt, "state", c.State, "error", c.Error)
			return
		}
		if errors.Is(err, jobs.ErrNotFound) {
			w.Logger.Error("completion refused", "attempt", c.Attempt, "err", err)
			return
		}
		w.Logger.Warn("could not report completion; retrying", "attempt", c.Attempt, "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-w.report.Done():
			w.Logger.Error("gave up reporting completion", "attempt", c.Attempt, "state", c.State)
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

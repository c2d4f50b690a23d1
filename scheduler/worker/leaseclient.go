package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/faults"
)

// leaseClient is an attempt's lease as its worker sees it:
// IDLE → ACQUIRING → HELD → SUSPECT → LOST. It renews at a third of the
// TTL. An attempt granted ahead of its fire time holds a short TTL (short,
// jobs.Spec.PreStartLease) until its process starts (beginWork), and the
// job's whole lease_ttl from then on (scheduler/fsm/prestart.go says why). A lease is valid until the send time of the last confirmed renewal
// plus the TTL — the leader extended it no earlier than that. SUSPECT
// means less than a third of the TTL is left, too little to start another
// unit of work; LOST comes on a definite "not yours" from the leader or
// when the lease runs out, and kills the attempt's process group. Time is
// the worker's Clock (leaseclient_test.go drives it).
type leaseClient struct {
	w       *Worker
	attempt string
	ttl     time.Duration
	// short is the TTL before the start; 0: the whole ttl throughout.
	short time.Duration
	// startAsk is when an attempt granted ahead asks the leader to
	// confirm its start (awaitStart), a renewal of its own, as long before
	// its fire time as the worker's recent asks needed (startlead.go);
	// zero: none, the start is asked for with the lease.
	startAsk time.Time
	log      *slog.Logger

	mu         sync.Mutex
	state      string
	validUntil time.Time
	why        string
	lost       chan struct{}
	confirmed  bool
	dropped    int
	// start: renewals ask the leader to confirm the start, from when the
	// process is about to start; startOK: a leader did
	// (scheduler/startconfirm.go).
	start, startOK bool
	// working: the process has started (beginWork), and the lease is
	// the whole ttl.
	working bool
	// confirmedSent is the send time of the latest confirmed renewal.
	confirmedSent time.Time
	// askSince is the send of the first of the start's asks that timed
	// out, unanswered (zero: none): the answer to a later one is timed
	// from there, as the leader may have confirmed the first.
	askSince time.Time
}

// lease is the TTL in force: short until the work starts, then ttl;
// c.mu is held.
func (c *leaseClient) lease() time.Duration {
	if c.short > 0 && !c.working {
		return c.short
	}
	return c.ttl
}

// currentTTL is lease, for a caller without c.mu.
func (c *leaseClient) currentTTL() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease()
}

// beginWork reports whether the work may start at now: the lease is
// HELD, still valid, and was confirmed within the TTL in force (the short
// one, for an attempt granted ahead); if so the lease is the job's whole
// lease_ttl from here on, counted from the latest confirmed renewal as
// the leader counts it from its confirmation of the start. A worker that
// was paused past its short lease does not start on what it held before
// the pause.
func (c *leaseClient) beginWork(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != LeaseHeld || !now.Before(c.validUntil) || !now.Before(c.confirmedSent.Add(c.lease())) {
		return false
	}
	if !c.working {
		c.working = true
		if until := c.confirmedSent.Add(c.ttl); until.After(c.validUntil) {
			c.validUntil = until
		}
	}
	return true
}

func (c *leaseClient) State() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// standing is the instant the lease runs out without another confirmed
// renewal, and its state, read together.
func (c *leaseClient) standing() (until time.Time, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.validUntil, c.state
}

func (c *leaseClient) isLost() bool {
	select {
	case <-c.lost:
		return true
	default:
		return false
	}
}

func (c *leaseClient) reason() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.why
}

// renewOnce sends one renewal and records the answer; it returns when the
// renewal was sent. A failed call is not an answer: only the clock can
// turn it into LOST. A confirmed renewal makes the lease valid until its
// send time plus the TTL, however late the reply came: the leader
// extended the lease no earlier than the send.
func (c *leaseClient) renewOnce(ctx context.Context) (sent time.Time) {
	clock := c.w.clock()
	sent = clock.Now()
	c.mu.Lock()
	start, preStart, lease := c.start, c.short > 0 && !c.working, c.lease()
	asking := start && !c.startOK
	c.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, max(lease/3, 50*time.Millisecond))
	reply, err := c.w.renew(rctx, c.attempt, start, preStart)
	cancel()
	answered := clock.Now()
	c.w.observer().LeaseRenewed(answered.Sub(sent), err)
	if asking {
		c.timeAsk(sent, answered, err)
	}
	c.mu.Lock()
	if err == nil && c.confirmed {
		err = faults.DropRenewReply(c.w.Faults, &c.dropped)
	}
	c.mu.Unlock()
	switch {
	case err != nil:
		c.log.Warn("lease renewal failed", "err", err, "state", c.State())
	case !reply.Held:
		c.lose("the leader says: " + reply.Reason)
	default:
		c.mu.Lock()
		// The lease this renewal was sent for: a short one sent before
		// the start extends the lease by no more than the leader did.
		if until := sent.Add(lease); until.After(c.validUntil) {
			c.validUntil = until
		}
		if sent.After(c.confirmedSent) {
			c.confirmedSent = sent
		}
		c.confirmed = true
		// A leader that confirms starts answers Started; an older one
		// answers Held alone, and the worker starts as it did with it.
		c.startOK = c.startOK || start
		if c.state != LeaseLost && c.state != LeaseHeld {
			if c.state == LeaseSuspect {
				c.log.Info("lease held again")
			}
			c.state = LeaseHeld
		}
		c.mu.Unlock()
	}
	return sent
}

// timeAsk records how long the start's ask sent at sent took to be
// answered at answered (startlead.go). An ask that timed out is timed on
// to the answer of the next: the leader may have confirmed it (committing
// confirm_starts) and answer the next at once, which alone would make a
// slow leader look fast. One that failed otherwise (no leader, a refused
// connection) is not slowness of the answers, and is left out.
func (c *leaseClient) timeAsk(sent, answered time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		if !c.askSince.IsZero() {
			sent, c.askSince = c.askSince, time.Time{}
		}
		c.w.asks.observe(answered, answered.Sub(sent))
	case errors.Is(err, context.DeadlineExceeded):
		if c.askSince.IsZero() {
			c.askSince = sent
		}
	default:
		c.askSince = time.Time{}
	}
}

// askStart makes every renewal from now on ask for the start's
// confirmation, and sends one now unless a leader already confirmed it.
// It reports whether a leader has.
func (c *leaseClient) askStart(ctx context.Context) bool {
	c.mu.Lock()
	c.start = true
	ok := c.startOK
	c.mu.Unlock()
	if !ok && !c.isLost() {
		c.renewOnce(ctx)
	}
	return c.startConfirmed()
}

func (c *leaseClient) startConfirmed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startOK
}

// acquire confirms the lease before work starts: ACQUIRING until the
// leader answers, for at most one TTL. It reports whether it is HELD.
func (c *leaseClient) acquire(ctx context.Context) bool {
	clock := c.w.clock()
	ttl := c.currentTTL()
	deadline := clock.Now().Add(ttl)
	backoff := 50 * time.Millisecond
	for {
		c.renewOnce(ctx)
		switch st := c.State(); {
		case st == LeaseHeld:
			return true
		case st == LeaseLost:
			return false
		case clock.Now().Add(backoff).After(deadline) || ctx.Err() != nil:
			c.lose(fmt.Sprintf("no leader confirmed the lease within %s", ttl))
			return false
		}
		jobs.Sleep(ctx, clock, backoff)
		backoff = min(2*backoff, ttl/4)
	}
}

// confirm confirms the lease in the background and reports the outcome
// on held: at once, or, withStart (confirmAtStart), with the start's ask
// once established is closed. settle is for an attempt that ends before
// its start: it calls off an ask not yet sent and waits for the outcome.
func (c *leaseClient) confirm(ctx context.Context, withStart bool, established <-chan struct{}) (held <-chan bool, settle func()) {
	out := make(chan bool, 1)
	if !withStart {
		go func() { out <- c.acquire(ctx) }()
		return out, func() { <-out }
	}
	actx, stop := context.WithCancel(ctx)
	go func() {
		defer stop()
		out <- c.acquireWithStart(actx, established)
	}()
	return out, func() { stop(); <-out }
}

// acquireWithStart is acquire for an attempt granted ahead whose lease
// the leader holds until its start's ask (confirmAtStart): it waits until
// startAsk and until ready is closed (the attempt established at the
// store, if it has an output), then acquires with every renewal asking
// for the start, so that the ask is the first renewal and the lease is
// confirmed with the start. Shut down while it waits, it reports false
// with the lease not LOST.
func (c *leaseClient) acquireWithStart(ctx context.Context, ready <-chan struct{}) bool {
	clock := c.w.clock()
	t := clock.NewTimer(max(c.startAsk.Sub(clock.Now()), 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
	}
	select {
	case <-ctx.Done():
		return false
	case <-ready:
	}
	c.mu.Lock()
	c.start = true
	c.mu.Unlock()
	return c.acquire(ctx)
}

// confirmAtStart reports whether an attempt granted at granted (the
// leader's clock), dispatched to this worker at now (its own), may leave
// its lease's confirmation to its start's ask: the ask comes before the
// short lease the leader counts from the grant, for an attempt it has not
// heard from, would turn SUSPECT, as it does for a lease_ttl of 2.2 s or
// more with the least start lead (a grant 500 ms ahead, a short lease of
// two thirds of a second or more), and for every lease_ttl when the asks
// go 100 ms ahead (startlead.go). A run granted 500 ms ahead then sends
// one renewal before it starts instead of three (its lease's
// confirmation, one at a third of the short lease, and the ask): at 1,000
// HTTP fires a second those two cost the nodes up to a fifth of their
// CPU. The ask is timed on this worker's clock against the leader's grant
// time: a worker whose clock is behind asks that much later on the
// leader's, which the rest of the short lease absorbs up to about half a
// second (cluster.max_clock_skew flags 500 ms by default), and one whose
// clock reads earlier than the grant when the dispatch arrives confirms
// its lease at once.
func (c *leaseClient) confirmAtStart(granted, now time.Time) bool {
	return c.short > 0 && !granted.IsZero() && !c.startAsk.IsZero() && !now.Before(granted) &&
		c.startAsk.Before(granted.Add(c.short-c.short/3))
}

// keep renews every third of the TTL, counted from the send of the last
// renewal, and checks the lease twenty times a TTL, until ctx ends. It
// calls stop when the lease is lost, which kills the attempt's process
// group.
func (c *leaseClient) keep(ctx context.Context, stop context.CancelFunc) {
	c.startKeep()(ctx, stop)
}

// startKeep starts keep's clock now: its first check and renewal count
// from this call, not from when a goroutine gets to run the loop it
// returns (on a busy worker, or a test's fake clock, that can be later).
//
// The loop sleeps until the next thing that can happen: the next renewal,
// or the instant the lease would turn SUSPECT or run out if no renewal is
// confirmed before then. It does not poll: a loaded worker holds an open
// lease for every process waiting for a CPU, and a wake-up per lease every
// twentieth of a TTL grew with that backlog, taking more of the CPU the
// processes were waiting for. A LOST from elsewhere (a renewal sent to
// confirm a start) wakes it at once.
func (c *leaseClient) startKeep() func(ctx context.Context, stop context.CancelFunc) {
	clock := c.w.clock()
	every := func() time.Duration { return max(c.currentTTL()/3, 30*time.Millisecond) }
	nextRenew := clock.Now().Add(every())
	t := clock.NewTimer(c.untilNextCheck(clock.Now(), nextRenew))
	return func(ctx context.Context, stop context.CancelFunc) {
		defer func() { t.Stop() }()
		for armed := true; ; armed = false {
			if c.isLost() {
				stop()
				return
			}
			if !armed {
				t = clock.NewTimer(c.untilNextCheck(clock.Now(), nextRenew))
			}
			select {
			case <-ctx.Done():
				return
			case <-c.lost:
				continue
			case <-t.C():
			}
			// A lease that ran out is LOST before anything else: a
			// renewal sent now must not keep the work going while it
			// waits for an answer.
			if c.evaluate(clock.Now()); c.isLost() {
				continue
			}
			if !clock.Now().Before(nextRenew) {
				nextRenew = c.renewOnce(ctx).Add(every())
				c.evaluate(clock.Now())
			}
		}
	}
}

// minCheck is the least keep sleeps between checks, so that a deadline
// it has just reached cannot make it spin.
const minCheck = time.Millisecond

// untilNextCheck is how long keep may sleep at now: until the next
// renewal is due, or until evaluate would move the lease on (HELD to
// SUSPECT once less than a third of the TTL is left, anything to LOST when
// none is), whichever comes first. validUntil only ever grows, so a
// renewal confirmed meanwhile can only make keep wake early, never late.
func (c *leaseClient) untilNextCheck(now, nextRenew time.Time) time.Duration {
	until, st := c.standing()
	next := nextRenew
	if st == LeaseHeld {
		// evaluate turns SUSPECT strictly after suspectAt.
		if suspect := c.suspectAt(until).Add(time.Nanosecond); suspect.Before(next) {
			next = suspect
		}
	}
	if until.Before(next) {
		next = until
	}
	return max(next.Sub(now), minCheck)
}

// suspectAt is the instant after which a lease valid until until has
// less than a third of its TTL (the one in force) left: too little to
// start more work. Both evaluate and keep's sleep (untilNextCheck) take
// it from here.
func (c *leaseClient) suspectAt(until time.Time) time.Time {
	return until.Add(-c.currentTTL() / 3)
}

// evaluate moves HELD to SUSPECT and SUSPECT to LOST as the lease runs
// down without a confirmed renewal.
func (c *leaseClient) evaluate(now time.Time) {
	until, st := c.standing()
	left := until.Sub(now)
	switch {
	case st == LeaseLost:
	case left <= 0:
		c.lose(fmt.Sprintf("no renewal confirmed for %s: the lease ran out", c.currentTTL()))
	case now.After(c.suspectAt(until)) && st == LeaseHeld:
		c.mu.Lock()
		c.state = LeaseSuspect
		preStart := c.short > 0 && !c.working
		c.mu.Unlock()
		c.log.Warn("lease SUSPECT: too little left to start more work", "left", left.Round(time.Millisecond))
		if preStart {
			// Before the start a SUSPECT only holds the start back, and
			// the short lease makes it as frequent as renewals are slow:
			// counted here, not made a Raft entry on a busy leader.
			c.w.observer().LeaseTransition(jobs.EventSuspect)
			return
		}
		c.note(jobs.EventSuspect, fmt.Sprintf("%s of %s lease left without a confirmed renewal", left.Round(time.Millisecond), c.currentTTL()))
	}
}

// lose moves to LOST once.
func (c *leaseClient) lose(why string) {
	c.mu.Lock()
	if c.state == LeaseLost {
		c.mu.Unlock()
		return
	}
	c.state, c.why = LeaseLost, why
	close(c.lost)
	c.mu.Unlock()
	c.log.Warn("lease LOST: stopping the attempt", "why", why)
	c.note(jobs.EventLost, why)
}

// note tells the leader, in the background and best effort.
func (c *leaseClient) note(kind, detail string) {
	c.w.observer().LeaseTransition(kind)
	c.w.wg.Add(1)
	go func() {
		defer c.w.wg.Done()
		ctx, cancel := context.WithTimeout(c.w.report, 5*time.Second)
		defer cancel()
		if err := c.w.Leader.Note(ctx, c.attempt, kind, c.w.ID, detail); err != nil {
			c.log.Warn("could not tell the leader", "event", kind, "err", err)
		}
	}()
}

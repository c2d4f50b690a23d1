// Package clocktest is a jobs.Clock for tests: time stands still until the
// test moves it, and a test can wait until the code under test is waiting
// on a timer, so nothing sleeps to let a goroutine get somewhere.
package clocktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Clock is a fake jobs.Clock. Its timers fire during Advance, in the order
// of their deadlines, and never otherwise. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	changed chan struct{} // closed and replaced when timers are added
}

var _ jobs.Clock = (*Clock)(nil)

// New returns a clock that reads start until it is advanced.
func New(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now implements jobs.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements jobs.Clock. A timer of d <= 0 has fired already.
func (c *Clock) NewTimer(d time.Duration) jobs.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due
// on the way, earliest first, each with its own deadline as the time sent.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.now.Add(d)
	for i := c.earliest(end); i >= 0; i = c.earliest(end) {
		t := c.timers[i]
		c.timers = slices.Delete(c.timers, i, i+1)
		c.now = t.at
		t.ch <- t.at
	}
	c.now = end
}

// earliest is the index of the waiting timer due first, and no later
// than limit; -1 if none is. c.mu held.
func (c *Clock) earliest(limit time.Time) int {
	i := -1
	for j, t := range c.timers {
		if !t.at.After(limit) && (i < 0 || t.at.Before(c.timers[i].at)) {
			i = j
		}
	}
	return i
}

// AdvanceNext moves the clock to the deadline of the earliest waiting
// timer and fires it (and any other due then); it returns how far the
// clock moved, or false if no timer waits.
func (c *Clock) AdvanceNext() (time.Duration, bool) {
	return c.advanceToEarliest(never)
}

// never is later than any timer a test sets.
var never = time.Unix(1<<62, 0)

// AdvanceNextBy is AdvanceNext for a timer due no later than limit (zero:
// any timer): it reports whether it fired one. If it did not, changed is
// closed once a timer is added, so a caller can wait for one without
// polling.
func (c *Clock) AdvanceNextBy(limit time.Time) (fired bool, changed <-chan struct{}) {
	if limit.IsZero() {
		limit = never
	}
	c.mu.Lock()
	changed = c.changed
	c.mu.Unlock()
	if _, fired = c.advanceToEarliest(limit); fired {
		return true, nil
	}
	return false, changed
}

// advanceToEarliest moves the clock to the earliest timer due by limit
// and fires it (and any other due then).
func (c *Clock) advanceToEarliest(limit time.Time) (time.Duration, bool) {
	c.mu.Lock()
	i := c.earliest(limit)
	if i < 0 {
		c.mu.Unlock()
		return 0, false
	}
	d := c.timers[i].at.Sub(c.now)
	c.mu.Unlock()
	c.Advance(d)
	return d, true
}

// Timers returns how many timers are waiting to fire.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitTimers blocks until at least n timers are waiting to fire, i.e. the
// code under test has reached the point where it waits on the clock, or
// until ctx ends.
func (c *Clock) WaitTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		have, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d timers, %d pending: %w", n, have, ctx.Err())
		}
	}
}

// timer is one of a Clock's timers.
type timer struct {
	c  *Clock
	at time.Time
	ch chan time.Time
}

// C implements jobs.Timer.
func (t *timer) C() <-chan time.Time { return t.ch }

// Stop implements jobs.Timer: it reports whether it stopped the timer
// before it fired.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	i := slices.Index(t.c.timers, t)
	if i < 0 {
		return false
	}
	t.c.timers = slices.Delete(t.c.timers, i, i+1)
	return true
}

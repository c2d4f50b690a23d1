package clocktest

import (
	"context"
	"testing"
	"time"
)

var start = time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)

// Timers fire during Advance, earliest first, each with its deadline, and
// never otherwise; a stopped one never fires.
func TestClock_Advance(t *testing.T) {
	c := New(start)
	late, early, stopped := c.NewTimer(3*time.Second), c.NewTimer(time.Second), c.NewTimer(2*time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Errorf("Stop: want true once, then false")
	}
	if got := c.Timers(); got != 2 {
		t.Errorf("%d timers waiting, want 2", got)
	}
	c.Advance(999 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("fired before its deadline")
	default:
	}
	c.Advance(10 * time.Second)
	if got, want := <-early.C(), start.Add(time.Second); !got.Equal(want) {
		t.Errorf("early fired with %v, want %v", got, want)
	}
	if got, want := <-late.C(), start.Add(3*time.Second); !got.Equal(want) {
		t.Errorf("late fired with %v, want %v", got, want)
	}
	select {
	case <-stopped.C():
		t.Error("a stopped timer fired")
	default:
	}
	if got, want := c.Now(), start.Add(10999*time.Millisecond); !got.Equal(want) {
		t.Errorf("Now() = %v, want %v", got, want)
	}
	if now := c.NewTimer(0); len(now.C()) != 1 {
		t.Error("a timer of 0 has not fired at once")
	}
}

// WaitTimers returns once the code under test waits on the clock;
// AdvanceNext fires the earliest timer.
func TestClock_WaitTimersAndAdvanceNext(t *testing.T) {
	c := New(start)
	got := make(chan time.Time)
	go func() {
		tm := c.NewTimer(5 * time.Second)
		got <- <-tm.C()
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.WaitTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if d, ok := c.AdvanceNext(); !ok || d != 5*time.Second {
		t.Errorf("AdvanceNext = %s, %v; want 5s, true", d, ok)
	}
	if at := <-got; !at.Equal(start.Add(5 * time.Second)) {
		t.Errorf("fired with %v", at)
	}
	if _, ok := c.AdvanceNext(); ok {
		t.Error("AdvanceNext with no timer waiting moved the clock")
	}
}

// AdvanceNextBy fires only timers due by its limit, earliest first, and
// otherwise hands back a channel closed when a timer is added.
func TestClock_AdvanceNextBy(t *testing.T) {
	c := New(start)
	limit := start.Add(2 * time.Second)
	late, early := c.NewTimer(5*time.Second), c.NewTimer(time.Second)
	if fired, _ := c.AdvanceNextBy(limit); !fired {
		t.Fatal("the timer due before the limit did not fire")
	}
	if at := <-early.C(); !at.Equal(start.Add(time.Second)) || !c.Now().Equal(at) {
		t.Errorf("fired at %s, clock at %s; want both at %s", at, c.Now(), start.Add(time.Second))
	}
	fired, changed := c.AdvanceNextBy(limit)
	if fired || changed == nil {
		t.Fatalf("fired %v, changed %v: want nothing fired past the limit, and a channel to wait on", fired, changed)
	}
	select {
	case <-late.C():
		t.Fatal("the timer past the limit fired")
	case <-changed:
		t.Fatal("changed closed before any timer was added")
	default:
	}
	c.NewTimer(500 * time.Millisecond)
	select {
	case <-changed:
	default:
		t.Error("adding a timer did not close changed")
	}
	if fired, _ := c.AdvanceNextBy(limit); !fired {
		t.Error("the timer added before the limit did not fire")
	}
}

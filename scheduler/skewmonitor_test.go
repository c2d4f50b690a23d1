package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs/clocktest"
)

// audits records the audit entries a monitor sends.
type audits struct {
	mu      sync.Mutex
	entries []string
	got     chan struct{}
}

func (a *audits) Audit(_ context.Context, kind, node, detail string) error {
	a.mu.Lock()
	a.entries = append(a.entries, kind+" "+node+" "+detail)
	a.mu.Unlock()
	a.got <- struct{}{}
	return nil
}

func (a *audits) wait(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		select {
		case <-a.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("waited 10s for audit entry; have %v", a.entries)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.entries...)
}

// The offset is the peer's stamp against the middle of the round trip;
// of several samples the shortest round trip stands; a peer is flagged
// only when it is beyond the threshold even at the edge of the error,
// unflagged only well within it, and each change is one audit entry.
func TestSkewMonitor_FlagsAPeerBeyondTheThreshold(t *testing.T) {
	a := &audits{got: make(chan struct{}, 8)}
	m := &SkewMonitor{Self: "n1", MaxSkew: 500 * time.Millisecond, Audit: a.Audit, Logger: slog.New(slog.DiscardHandler)}
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	t0 := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// n2 is 3s ahead: sent at t0, answered 20ms later, stamped at the
	// middle of the trip by its own clock.
	m.Observe("n2", t0, t0.Add(ms(20)), t0.Add(ms(10)+3*time.Second))
	// A slower exchange with a worse estimate does not replace it.
	m.Observe("n2", t0.Add(time.Second), t0.Add(time.Second+ms(400)), t0.Add(time.Second+ms(50)+3*time.Second))
	// n3 is 450ms behind: within the threshold.
	m.Observe("n3", t0, t0.Add(ms(2)), t0.Add(ms(1)-ms(450)))
	// n4 is 600ms ahead, but the round trip of 400ms leaves 400..800: not
	// certainly beyond, so not flagged.
	m.Observe("n4", t0, t0.Add(ms(400)), t0.Add(ms(200)+ms(600)))
	peers := m.Peers()
	if len(peers) != 3 || peers[0].Peer != "n2" || peers[0].Offset != 3*time.Second || peers[0].RTT != ms(20) || !peers[0].Over ||
		peers[1].Peer != "n3" || peers[1].Offset != -ms(450) || peers[1].Over || peers[2].Over {
		t.Fatalf("peers %+v: want n2 +3s flagged, n3 -450ms and n4 not", peers)
	}
	if over := m.Over(); len(over) != 1 || over[0].Peer != "n2" {
		t.Errorf("over = %+v", over)
	}
	got := a.wait(t, 1)
	if want := "clock_skew n1 n2's clock is 3.000s ahead of n1's (±0.010s; cluster.max_clock_skew 500ms)"; got[0] != want {
		t.Errorf("audit %q, want %q", got[0], want)
	}
	// Back to 450ms is not "well within" (375ms): still flagged.
	for i := range skewSamples {
		at := t0.Add(time.Duration(i+2) * time.Second)
		m.Observe("n2", at, at.Add(ms(2)), at.Add(ms(1)+ms(450)))
	}
	if over := m.Over(); len(over) != 1 {
		t.Errorf("at 450ms, with hysteresis: over = %+v, want still flagged", over)
	}
	// Fixed: unflagged, one more entry (a minute after the first).
	at := t0.Add(2 * time.Minute)
	for i := range skewSamples {
		s := at.Add(time.Duration(i) * time.Second)
		m.Observe("n2", s, s.Add(ms(2)), s.Add(ms(1)+ms(5)))
	}
	if over := m.Over(); len(over) != 0 {
		t.Errorf("after the fix: over = %+v", over)
	}
	got = a.wait(t, 1)
	if want := "clock_skew n1 n2's clock is back within 500ms of n1's (now 0.005s ahead of)"; got[1] != want {
		t.Errorf("audit %q, want %q", got[1], want)
	}
	// Its own name, a missing stamp and a negative round trip are ignored.
	m.Observe("n1", t0, t0, t0.Add(time.Hour))
	m.Observe("n5", t0, t0, time.Time{})
	m.Observe("n6", t0, t0.Add(-time.Second), t0)
	if n := len(m.Peers()); n != 3 {
		t.Errorf("%d peers after ignored samples, want 3", n)
	}
}

// A flapping peer makes at most one audit entry per skewEventEvery, and
// a full queue drops entries rather than block the caller.
func TestSkewMonitor_BoundsItsEntries(t *testing.T) {
	m := &SkewMonitor{Self: "n1", Logger: slog.New(slog.DiscardHandler)}
	m.events = make(chan string, skewEventQueue)
	t0 := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	for i := range 200 {
		at := t0.Add(time.Duration(i) * time.Second)
		off := time.Second
		if i%2 == 1 {
			off = 0
		}
		// Fresh samples each time: the newest replaces the window.
		for j := range skewSamples {
			s := at.Add(time.Duration(j) * time.Millisecond)
			m.Observe("n2", s, s, s.Add(off))
		}
	}
	// 200 seconds, one entry a minute at most: 4.
	if n := len(m.events); n > 4 {
		t.Errorf("%d entries queued for 100 flaps in 200s, want at most 4", n)
	}
	for i := range 3 * skewEventQueue {
		m.Observe(fmt.Sprintf("p%d", i), t0, t0, t0.Add(time.Hour))
	}
	if n := len(m.events); n != skewEventQueue {
		t.Errorf("queue holds %d, want it full at %d (the rest dropped)", n, skewEventQueue)
	}
	if got := DefaultMaxClockSkew; m.Max() != got {
		t.Errorf("default threshold %s, want %s", m.Max(), got)
	}
}

// Peers nothing measured lately are asked; a peer measured by other
// calls is not.
func TestSkewMonitor_ProbesUnmeasuredPeers(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	probed := make(chan string, 4)
	m := &SkewMonitor{Self: "n1", Logger: slog.New(slog.DiscardHandler)}
	now := time.Now()
	m.Observe("n2", now, now, now) // measured just now
	m.Members = func() []string { return []string{"n1", "n2", "n3"} }
	m.Probe = func(_ context.Context, peer string) error {
		mu.Lock()
		asked[peer]++
		mu.Unlock()
		probed <- peer
		return nil
	}
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-probed:
		if p != "n3" {
			t.Errorf("probed %s first, want n3", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no probe in 10s")
	}
	m.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if asked["n2"] != 0 || asked["n1"] != 0 {
		t.Errorf("asked %v: n2 was measured and n1 is this node", asked)
	}
}

// An entry the leader could not take (no leader yet) is tried again,
// a bounded number of times.
func TestSkewMonitor_RetriesItsEntry(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	calls := 0
	done := make(chan struct{})
	m := &SkewMonitor{Self: "n1", Clock: clock, Logger: slog.New(slog.DiscardHandler),
		Audit: func(context.Context, string, string, string) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls < skewAuditTries {
				return fmt.Errorf("no leader known")
			}
			close(done)
			return nil
		}}
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	now := clock.Now()
	m.Observe("n2", now, now, now.Add(time.Hour))
	for range skewAuditTries - 1 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := clock.WaitTimers(ctx, 1)
		cancel()
		if err != nil {
			t.Fatalf("no backoff timer: %v", err)
		}
		clock.AdvanceNext()
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the entry was not recorded after %d calls", calls)
	}
}

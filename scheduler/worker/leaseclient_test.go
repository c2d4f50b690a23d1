package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/clocktest"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// leaseT0 is when every lease test starts, on its fake clock.
var leaseT0 = time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)

// renewAnswer is how a scripted leader answers one renewal.
type renewAnswer struct {
	// took is how long the reply takes on the fake clock: the leader
	// moves the clock by it while the call is in flight.
	took time.Duration
	// err: no answer (the call failed); else held, or not with reason.
	err    error
	held   bool
	reason string
}

var (
	held      = &renewAnswer{held: true}
	noAnswer  = &renewAnswer{err: errors.New("connection refused")}
	notYours  = &renewAnswer{reason: "attempt expired"}
	slowHeld  = func(took time.Duration) *renewAnswer { return &renewAnswer{held: true, took: took} }
	errSilent = errors.New("no leader")
)

// scriptLeader answers renewals from a script, in order; once the script
// is used up, every renewal fails (no leader answers). It records when
// each renewal was sent and the notes it was told.
type scriptLeader struct {
	holdingLeader
	clock *clocktest.Clock

	mu      sync.Mutex
	script  []*renewAnswer
	sent    []time.Duration // send times, from leaseT0
	pre     []bool          // each renewal's PreStart
	noted   []string        // note kinds
	started int
}

// RenewMany answers each renewal from the script; a failed one fails
// the batch.
func (l *scriptLeader) RenewMany(_ context.Context, _ string, rs []Renewal) ([]RenewReply, error) {
	out := make([]RenewReply, len(rs))
	for i, r := range rs {
		l.mu.Lock()
		l.pre = append(l.pre, r.PreStart)
		l.mu.Unlock()
		reply, err := l.renew()
		if err != nil {
			return nil, err
		}
		out[i] = reply
	}
	return out, nil
}

func (l *scriptLeader) renew() (RenewReply, error) {
	l.mu.Lock()
	l.sent = append(l.sent, l.clock.Now().Sub(leaseT0))
	var a *renewAnswer
	if len(l.script) > 0 {
		a, l.script = l.script[0], l.script[1:]
	}
	l.mu.Unlock()
	if a == nil {
		return RenewReply{}, errSilent
	}
	l.clock.Advance(a.took)
	if a.err != nil {
		return RenewReply{}, a.err
	}
	return RenewReply{Held: a.held, Reason: a.reason}, nil
}

func (l *scriptLeader) Note(_ context.Context, _, kind, _, _ string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noted = append(l.noted, kind)
	return nil
}

func (l *scriptLeader) Started(context.Context, string, time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started++
	return nil
}

func (l *scriptLeader) sends() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sent)
}

// transitions records the lease transitions a worker's Observer sees.
type transitions struct {
	NopObserver
	mu    sync.Mutex
	kinds []string
}

func (o *transitions) LeaseTransition(kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kinds = append(o.kinds, kind)
}

func (o *transitions) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.kinds)
}

// leaseFixture is a worker on a fake clock with a scripted leader, and
// one attempt's lease client in ACQUIRING, as runAttempt makes it.
type leaseFixture struct {
	clock  *clocktest.Clock
	leader *scriptLeader
	obs    *transitions
	w      *Worker
	lc     *leaseClient
}

const testTTL = 30 * time.Second

func newLeaseFixture(t *testing.T, script ...*renewAnswer) *leaseFixture {
	t.Helper()
	clock := clocktest.New(leaseT0)
	l := &scriptLeader{holdingLeader: holdingLeader{done: make(chan replicated.Completion, 1)}, clock: clock, script: script}
	obs := &transitions{}
	w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Clock: clock, Observer: obs, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	lc := &leaseClient{w: w, attempt: "job@x.1", ttl: testTTL, state: LeaseAcquiring, lost: make(chan struct{}), log: w.Logger}
	return &leaseFixture{clock: clock, leader: l, obs: obs, w: w, lc: lc}
}

// The lease client's states, step by step: each step moves the fake
// clock to leaseT0+at, sends a renewal answered as scripted (if any), then
// checks the lease as the keep loop does once it has been confirmed.
func TestLeaseClient_States(t *testing.T) {
	type step struct {
		at    time.Duration
		renew *renewAnswer
		want  string
	}
	third := testTTL / 3
	for _, tc := range []struct {
		name  string
		steps []step
		// transitions the Observer saw; reason is in the LOST reason.
		transitions []string
		reason      string
	}{{
		name:  "a confirmed renewal holds the lease",
		steps: []step{{0, held, LeaseHeld}},
	}, {
		name:  "no answer leaves it ACQUIRING",
		steps: []step{{0, noAnswer, LeaseAcquiring}, {time.Second, held, LeaseHeld}},
	}, {
		name:        "a definite no while ACQUIRING is LOST",
		steps:       []step{{0, notYours, LeaseLost}},
		transitions: []string{jobs.EventLost}, reason: "attempt expired",
	}, {
		name:  "renewals every third of the TTL keep it HELD",
		steps: []step{{0, held, LeaseHeld}, {third, held, LeaseHeld}, {2 * third, held, LeaseHeld}, {3 * third, held, LeaseHeld}, {3*third + 2*third, nil, LeaseHeld}},
	}, {
		name:        "SUSPECT once less than a third of the TTL is left",
		steps:       []step{{0, held, LeaseHeld}, {2 * third, nil, LeaseHeld}, {2*third + time.Millisecond, nil, LeaseSuspect}},
		transitions: []string{jobs.EventSuspect},
	}, {
		name: "a confirmed renewal makes a SUSPECT lease HELD again, counted from its send",
		steps: []step{{0, held, LeaseHeld}, {25 * time.Second, nil, LeaseSuspect}, {26 * time.Second, held, LeaseHeld},
			{26*time.Second + 2*third, nil, LeaseHeld}, {26*time.Second + 2*third + time.Millisecond, nil, LeaseSuspect}},
		transitions: []string{jobs.EventSuspect, jobs.EventSuspect},
	}, {
		// Sent at 10s, answered at 19s: valid until 40s, not 49s. At
		// 30.001s a lease counted from the reply would have 19s left.
		name: "valid from when the renewal was sent, not when the reply came",
		steps: []step{{0, held, LeaseHeld}, {10 * time.Second, slowHeld(9 * time.Second), LeaseHeld},
			{30*time.Second + time.Millisecond, nil, LeaseSuspect}, {40 * time.Second, nil, LeaseLost}},
		transitions: []string{jobs.EventSuspect, jobs.EventLost}, reason: "ran out",
	}, {
		name:        "a reply that took most of the TTL leaves too little to start work",
		steps:       []step{{0, slowHeld(25 * time.Second), LeaseSuspect}},
		transitions: []string{jobs.EventSuspect},
	}, {
		name:        "failed renewals do not lose the lease; the clock does",
		steps:       []step{{0, held, LeaseHeld}, {third, noAnswer, LeaseHeld}, {2 * third, noAnswer, LeaseHeld}, {25 * time.Second, noAnswer, LeaseSuspect}, {testTTL - time.Millisecond, nil, LeaseSuspect}, {testTTL, nil, LeaseLost}},
		transitions: []string{jobs.EventSuspect, jobs.EventLost}, reason: "ran out",
	}, {
		name:        "a definite no is LOST at once, with lease left",
		steps:       []step{{0, held, LeaseHeld}, {third, notYours, LeaseLost}},
		transitions: []string{jobs.EventLost}, reason: "the leader says: attempt expired",
	}, {
		name:        "LOST is final",
		steps:       []step{{0, held, LeaseHeld}, {third, notYours, LeaseLost}, {third + time.Second, held, LeaseLost}, {2 * third, held, LeaseLost}},
		transitions: []string{jobs.EventLost},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var script []*renewAnswer
			for _, s := range tc.steps {
				if s.renew != nil {
					script = append(script, s.renew)
				}
			}
			f := newLeaseFixture(t, script...)
			for i, s := range tc.steps {
				if now := f.clock.Now().Sub(leaseT0); s.at > now {
					f.clock.Advance(s.at - now)
				}
				if s.renew != nil {
					f.lc.renewOnce(t.Context())
				}
				if f.lc.State() != LeaseAcquiring {
					f.lc.evaluate(f.clock.Now())
				}
				if got := f.lc.State(); got != s.want {
					t.Fatalf("step %d (at %s): state %s, want %s", i, s.at, got, s.want)
				}
			}
			if got := f.obs.seen(); !slices.Equal(got, tc.transitions) {
				t.Errorf("transitions %v, want %v", got, tc.transitions)
			}
			if f.lc.isLost() != (f.lc.State() == LeaseLost) {
				t.Errorf("lost channel closed = %v in state %s", f.lc.isLost(), f.lc.State())
			}
			if !strings.Contains(f.lc.reason(), tc.reason) {
				t.Errorf("LOST reason %q, want it to say %q", f.lc.reason(), tc.reason)
			}
		})
	}
}

// completion drives the fixture's clock until its attempt reports its
// completion, for at most 30s of real time.
func (f *leaseFixture) completion(t *testing.T) replicated.Completion {
	t.Helper()
	return f.completionBy(t, time.Time{})
}

// completionBy is completion with the clock stopped at limit (driveUntil);
// zero: never stopped.
func (f *leaseFixture) completionBy(t *testing.T, limit time.Time) replicated.Completion {
	t.Helper()
	driven := make(chan struct{})
	defer close(driven)
	go driveUntil(t, f.clock, limit, driven)
	select {
	case c := <-f.leader.done:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt did not end within 30s")
		return replicated.Completion{}
	}
}

// drive fires the fake clock's timers as soon as the code under test
// waits on one, until done is closed: time moves only as fast as the code
// waits on it.
func drive(t *testing.T, clock *clocktest.Clock, done <-chan struct{}) {
	driveUntil(t, clock, time.Time{}, done)
}

// driveUntil is drive with the clock stopped at limit (zero: never): the
// timers due later never fire. While the code under test does real work (runs a
// process), drive would move the clock through every timer it has
// pending, as fast as the goroutines that answer them are scheduled; on a
// loaded machine a lease then runs out in fake time before its renewal's
// goroutine got to run.
func driveUntil(t *testing.T, clock *clocktest.Clock, limit time.Time, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-done; cancel() }()
	for ctx.Err() == nil {
		if fired, changed := clock.AdvanceNextBy(limit); !fired {
			select {
			case <-changed:
			case <-ctx.Done():
			}
		}
	}
}

// ACQUIRING lasts at most one TTL: the client retries with backoff on
// the clock, and gives up (LOST) when no leader confirmed the lease in
// that time; one answer in time is enough.
func TestLeaseClient_Acquire(t *testing.T) {
	t.Run("gives up after one TTL without an answer", func(t *testing.T) {
		f := newLeaseFixture(t)
		done := make(chan struct{})
		var ok bool
		go func() { defer close(done); ok = f.lc.acquire(t.Context()) }()
		drive(t, f.clock, done)
		if ok || f.lc.State() != LeaseLost || !strings.Contains(f.lc.reason(), "no leader confirmed") {
			t.Errorf("acquire = %v, state %s (%s); want LOST, no leader confirmed", ok, f.lc.State(), f.lc.reason())
		}
		sends := f.leader.sends()
		if len(sends) < 3 || sends[len(sends)-1] > testTTL {
			t.Errorf("renewals sent at %v: want several retries within the TTL", sends)
		}
		if took := f.clock.Now().Sub(leaseT0); took > testTTL {
			t.Errorf("gave up after %s, more than the TTL", took)
		}
	})
	t.Run("retries until the leader answers", func(t *testing.T) {
		f := newLeaseFixture(t, noAnswer, noAnswer, noAnswer, held)
		done := make(chan struct{})
		var ok bool
		go func() { defer close(done); ok = f.lc.acquire(t.Context()) }()
		drive(t, f.clock, done)
		if !ok || f.lc.State() != LeaseHeld {
			t.Errorf("acquire = %v, state %s; want HELD", ok, f.lc.State())
		}
		if sends := f.leader.sends(); len(sends) != 4 || !slices.IsSorted(sends) || sends[1] == 0 {
			t.Errorf("renewals sent at %v: want 4, spaced by the backoff", sends)
		}
	})
}

// The keep loop renews every third of the TTL, counted from each send,
// and on a definite "not yours" calls stop: what kills the attempt's
// process group.
func TestLeaseClient_KeepStopsTheWorkWhenLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []*renewAnswer
		// sends are the renewals' send times; lostAt when stop came.
		sends       []time.Duration
		lostAt      time.Duration
		transitions []string
	}{{
		// The one sent at 20s is answered at 22s; the next is due 10s
		// after its send (30s), not after its reply (32s).
		name:        "a definite no",
		script:      []*renewAnswer{held, held, slowHeld(2 * time.Second), notYours},
		sends:       []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second},
		lostAt:      30 * time.Second,
		transitions: []string{jobs.EventLost},
	}, {
		// Every renewal after the first fails at once: SUSPECT just
		// after 20s, LOST at 30s, the instant the lease runs out, and
		// without sending the renewal due then.
		name:        "a silent leader",
		script:      []*renewAnswer{held},
		sends:       []time.Duration{0, 10 * time.Second, 20 * time.Second},
		lostAt:      30 * time.Second,
		transitions: []string{jobs.EventSuspect, jobs.EventLost},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLeaseFixture(t, tc.script...)
			if !f.lc.acquire(t.Context()) {
				t.Fatalf("not acquired: %s", f.lc.reason())
			}
			work, stop := context.WithCancel(t.Context())
			var stoppedAt time.Duration
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				f.lc.keep(work, func() { stoppedAt = f.clock.Now().Sub(leaseT0); stop() })
			}()
			drive(t, f.clock, stopped)
			if work.Err() == nil {
				t.Fatalf("keep returned without stopping the work")
			}
			if stoppedAt != tc.lostAt || f.lc.State() != LeaseLost {
				t.Errorf("stopped at %s in state %s, want LOST at %s", stoppedAt, f.lc.State(), tc.lostAt)
			}
			if got := f.leader.sends(); !slices.Equal(got, tc.sends) {
				t.Errorf("renewals sent at %v, want %v", got, tc.sends)
			}
			if got := f.obs.seen(); !slices.Equal(got, tc.transitions) {
				t.Errorf("transitions %v, want %v", got, tc.transitions)
			}
		})
	}
}

// A lease whose renewals are answered wakes its loop only to renew. A
// loaded worker holds a lease for every process it runs or has waiting
// for a CPU, so a wake-up per lease that does nothing grows with the
// backlog; polling every TTL/20 woke it 64 times in 96s, not 10.
func TestLeaseClient_KeepWakesOnlyToRenew(t *testing.T) {
	script := make([]*renewAnswer, 12)
	for i := range script {
		script[i] = held
	}
	f := newLeaseFixture(t, script...)
	if !f.lc.acquire(t.Context()) {
		t.Fatalf("not acquired: %s", f.lc.reason())
	}
	work, stop := context.WithCancel(t.Context())
	kept := make(chan struct{})
	go func() { defer close(kept); f.lc.keep(work, stop) }()
	wakes := 0
	for f.clock.Now().Sub(leaseT0) < 95*time.Second && wakes < 100 {
		if err := f.clock.WaitTimers(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		f.clock.AdvanceNext()
		wakes++
	}
	stop()
	<-kept
	if wakes != 10 {
		t.Errorf("the loop woke %d times in %s, want 10: once per renewal", wakes, f.clock.Now().Sub(leaseT0))
	}
	var sends []time.Duration
	for _, at := range f.leader.sends() {
		if at < 95*time.Second {
			sends = append(sends, at)
		}
	}
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second,
		50 * time.Second, 60 * time.Second, 70 * time.Second, 80 * time.Second, 90 * time.Second}
	if !slices.Equal(sends, want) {
		t.Errorf("renewals sent at %v, want every third of the TTL: %v", sends, want)
	}
	if f.lc.State() != LeaseHeld || len(f.obs.seen()) != 0 {
		t.Errorf("state %s, transitions %v; want HELD throughout", f.lc.State(), f.obs.seen())
	}
}

// A worker whose lease is lost while its job runs kills the job's
// process group (a child of its shell included) and reports the attempt
// lost; time is the fake clock's, the processes are real. The job hands
// its child's pid through a FIFO, so the clock moves only once it runs.
func TestWorker_LostLeaseKillsTheProcessGroup(t *testing.T) {
	f := newLeaseFixture(t, held, held, notYours)
	fifo := filepath.Join(t.TempDir(), "pid")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	spec := jobs.Spec{Name: "long", Shell: `sleep 60 & echo $! > "$PID_FIFO"; wait`, Env: map[string]string{"PID_FIFO": fifo},
		Timeout: jobs.Duration(time.Hour), LeaseTTL: jobs.Duration(testTTL)}
	a := Assignment{Run: jobs.Run{ID: "long@x", Job: "long"}, Spec: spec,
		Attempt: jobs.Attempt{ID: "long@x.1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 1, Seq: 1}, GrantedAt: leaseT0}}
	if err := f.w.Accept(a); err != nil {
		t.Fatal(err)
	}
	// Opening the FIFO blocks until the job opens it to write.
	pidText, err := os.ReadFile(fifo)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatalf("the job wrote %q, not its child's pid", pidText)
	}
	// A pidfd becomes readable when the process ends.
	pidfd, err := unix.PidfdOpen(child, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	// Both of the attempt's timers (the keep loop's first check and the
	// start report) exist before the clock moves: advanced to the start
	// report's first, the keep loop would count its renewals from there.
	if err := f.clock.WaitTimers(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	c := f.completion(t)
	if c.State != jobs.Lost || !strings.Contains(c.Error, "process group was killed") || c.Signal == "" {
		t.Errorf("completion %+v: want lost, the process killed by a signal", c)
	}
	if got, want := f.leader.sends(), []time.Duration{0, 10 * time.Second, 20 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("renewals sent at %v, want %v", got, want)
	}
	// The executor waits for the shell; its child dies of the same
	// signal to the group, a moment later at most.
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 10_000); n != 1 {
		syscall.Kill(child, syscall.SIGKILL)
		t.Errorf("the job's child %d outlived the attempt by 10s (poll: %v)", child, err)
	}
}

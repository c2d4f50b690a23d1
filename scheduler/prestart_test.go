package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/clocktest"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// A run granted ahead holds the short lease until its start is
// confirmed: a worker that goes quiet before the fire time loses it a
// short lease after its last renewal, and the run is taken over in the
// expiry's entry without using a retry. Once the start is confirmed, the
// whole lease_ttl holds. A worker of a release before short leases keeps
// the whole lease.
func TestLeader_ShortLeaseBeforeTheStart(t *testing.T) {
	at := func(d time.Duration) fixedClock { return fixedClock{base.Add(d)} }
	setup := func(t *testing.T) (*leader, jobs.Run) {
		l, s := shortLeaseLeader(t)
		run, err := l.fire(s, base.Add(500*time.Millisecond), "schedule", false) // granted at base, ahead
		if err != nil {
			t.Fatal(err)
		}
		return l, run
	}

	t.Run("a quiet worker is taken over a short lease after its last renewal", func(t *testing.T) {
		l, run := setup(t)
		id := run.Attempts[0].ID
		l.s.Clock = at(300 * time.Millisecond)
		if r, err := renewOne(l, worker.Renewal{Attempt: id, Confirming: true, PreStart: true}, "n1"); err != nil || !r.Held || r.TTL.D() != time.Second {
			t.Fatalf("renewal before the start: %+v, %v; want held for the short lease, 1s", r, err)
		}
		// The worker dies. A short lease after its renewal, not yet.
		l.s.Clock = at(1300 * time.Millisecond)
		l.checkLeases()
		if got, _ := l.s.FSM.Run(run.ID); len(got.Attempts) != 1 {
			t.Fatalf("expired %s after the last renewal: attempts %+v; want none before a short lease", time.Second, got.Attempts)
		}
		l.s.Clock = at(1301 * time.Millisecond)
		l.checkLeases()
		got, _ := l.s.FSM.Run(run.ID)
		if len(got.Attempts) != 2 || !got.Attempts[0].NeverStarted || !strings.Contains(got.Attempts[0].Error, "before the start") || got.State != jobs.Pending {
			t.Fatalf("after the short lease ran out: run %s, attempts %+v; want the first never started and a takeover", got.State, got.Attempts)
		}
		if a, b := got.Attempts[0].Token, got.Attempts[1].Token; !a.Less(b) {
			t.Errorf("takeover token %s, want newer than %s", b, a)
		}
		// The takeover starts at once (its fire time has passed): the
		// whole lease.
		if le := l.leases[got.Attempts[1].ID]; le == nil || le.onShort || !le.deadline.Equal(base.Add(1301*time.Millisecond+6*time.Second)) {
			t.Errorf("the takeover's lease %+v: want the whole lease_ttl from its grant", le)
		}
		// The worker wakes up: its start is refused.
		if r, _ := renewOne(l, worker.Renewal{Attempt: id, Start: true, Confirming: true, PreStart: true}, "n1"); r.Held || r.Started {
			t.Errorf("the expired attempt's start: %+v; want a definite no", r)
		}
	})
	t.Run("a confirmed start holds the whole lease", func(t *testing.T) {
		l, run := setup(t)
		id := run.Attempts[0].ID
		l.s.Clock = at(475 * time.Millisecond)
		if r, err := renewOne(l, worker.Renewal{Attempt: id, Start: true, Confirming: true, PreStart: true}, "n1"); err != nil || !r.Started || r.TTL.D() != 6*time.Second {
			t.Fatalf("the start's confirmation: %+v, %v; want started, for the whole lease", r, err)
		}
		l.s.Clock = at(6 * time.Second)
		l.checkLeases()
		if got, _ := l.s.FSM.Run(run.ID); len(got.Attempts) != 1 || got.Attempts[0].State != jobs.Pending {
			t.Errorf("a started attempt within its whole lease: attempts %+v; want it kept", got.Attempts)
		}
	})
	t.Run("a worker of an older release", func(t *testing.T) {
		l, run := setup(t)
		l.s.Raft.(*fakeRaft).oldRelease = true
		l.s.Clock = at(2 * time.Second)
		l.checkLeases()
		if got, _ := l.s.FSM.Run(run.ID); len(got.Attempts) != 1 {
			t.Fatalf("never heard from, after a short lease: attempts %+v; want it kept for the whole lease", got.Attempts)
		}
		l.s.Clock = at(6*time.Second + time.Millisecond)
		l.checkLeases()
		if got, _ := l.s.FSM.Run(run.ID); len(got.Attempts) != 2 || !got.Attempts[0].NeverStarted || strings.Contains(got.Attempts[0].Error, "before the start") {
			t.Errorf("after the whole lease: attempts %+v; want taken over, never started, not for a short lease", got.Attempts)
		}
	})
}

// A leader of a later term gives a run its predecessor granted ahead the
// short lease from its own election when the log shows that nobody
// confirmed its start (from its grant, if its worker cannot be reached),
// and takes it over without a retry once that runs out; one whose start
// the log confirmed keeps its whole lease.
func TestLeader_LaterTermTakesOverAnUnconfirmedStart(t *testing.T) {
	at := func(d time.Duration) fixedClock { return fixedClock{base.Add(d)} }
	setup := func(t *testing.T) (*leader, jobs.Run) {
		l, s := shortLeaseLeader(t)
		run := grantedAhead(t, l, s)
		if a := run.Attempts[0]; !a.StartInLog {
			t.Fatalf("granted ahead: %+v; want its start confirmed in the log", a)
		}
		return l, run
	}
	// newTerm elects the next term at `elected` and recovers its leases,
	// as the next leader loop does.
	newTerm := func(t *testing.T, l *leader, elected time.Duration) *leader {
		next := nextTerm(t, l, elected)
		next.recover()
		return next
	}

	t.Run("unconfirmed: taken over a short lease after the election", func(t *testing.T) {
		l, run := setup(t)
		// The leader dies; the next is elected at 1.1s.
		next := newTerm(t, l, 1100*time.Millisecond)
		next.s.Clock = at(2100 * time.Millisecond)
		next.checkLeases()
		if got, _ := next.s.FSM.Run(run.ID); len(got.Attempts) != 1 {
			t.Fatalf("a short lease after the election, not after it: attempts %+v; want the one", got.Attempts)
		}
		next.s.Clock = at(2101 * time.Millisecond)
		next.checkLeases()
		got, _ := next.s.FSM.Run(run.ID)
		if len(got.Attempts) != 2 || !got.Attempts[0].NeverStarted || !strings.Contains(got.Attempts[0].Error, "before the start") || got.State != jobs.Pending {
			t.Fatalf("after the short lease from the election: run %s, attempts %+v; want the first never started and a takeover", got.State, got.Attempts)
		}
		if a, b := got.Attempts[0].Token, got.Attempts[1].Token; b.Epoch != 4 || !a.Less(b) {
			t.Errorf("takeover token %s, want one of epoch 4, newer than %s", b, a)
		}
	})
	// Its worker cannot be reached (the dead leader held the run itself):
	// the dispatch recovery sends again is refused, and the run is taken
	// over a short lease after its grant, at once if that has passed by
	// the election.
	for _, c := range []struct {
		name                 string
		elected, kept, taken time.Duration
	}{
		{"unconfirmed and refused: taken over a short lease after its grant", 700 * time.Millisecond, 1500 * time.Millisecond, 1501 * time.Millisecond},
		{"unconfirmed and refused, elected after a short lease: taken over at once", 2500 * time.Millisecond, 0, 2500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, s := shortLeaseLeader(t)
			l.s.Dispatcher = &failingDispatcher{err: refused}
			run := grantedAhead(t, l, s)
			id := run.Attempts[0].ID
			next := newTerm(t, l, c.elected)
			defer l.endTerm() // ends the dispatch retries (next shares its context)
			if err := pollFor(5*time.Second, func() bool {
				next.mu.Lock()
				defer next.mu.Unlock()
				le := next.leases[id]
				return le != nil && le.deadline.Equal(base.Add(1500*time.Millisecond))
			}); err != nil {
				t.Fatalf("the recovered lease of an attempt whose dispatch failed: want it to end a short lease after its grant, at 1.5s")
			}
			if c.kept > 0 {
				next.s.Clock = at(c.kept)
				next.checkLeases()
				if got, _ := next.s.FSM.Run(run.ID); len(got.Attempts) != 1 {
					t.Fatalf("at %s, a short lease after the grant: attempts %+v; want the one", c.kept, got.Attempts)
				}
			}
			next.s.Clock = at(c.taken)
			next.checkLeases()
			// Expired without a retry, and taken over (by the only
			// worker there is, though a dispatch showed it gone).
			got, _ := next.s.FSM.Run(run.ID)
			if len(got.Attempts) != 2 || !got.Attempts[0].NeverStarted || !strings.Contains(got.Attempts[0].Error, "before the start") || got.State != jobs.Pending {
				t.Fatalf("at %s: run %s, attempts %+v; want the first never started, for its short lease, and a takeover", c.taken, got.State, got.Attempts)
			}
		})
	}
	// A dispatch that failed without showing the worker gone (a new
	// leader whose gossip has not heard of it yet) leaves the grace from
	// the election: the worker may be alive, and about to renew.
	t.Run("unconfirmed, its worker not known yet: the short lease from the election", func(t *testing.T) {
		l, s := shortLeaseLeader(t)
		d := &failingDispatcher{err: unheardOf}
		l.s.Dispatcher = d
		run := grantedAhead(t, l, s)
		id := run.Attempts[0].ID
		next := newTerm(t, l, 700*time.Millisecond)
		defer l.endTerm() // ends the dispatch retries (next shares its context)
		// The second try comes after the first's failure was handled.
		if err := pollFor(5*time.Second, func() bool { return d.calls.Load() >= 2 }); err != nil {
			t.Fatalf("dispatches: %d; want the recovery's dispatch tried again", d.calls.Load())
		}
		next.mu.Lock()
		defer next.mu.Unlock()
		if le := next.leases[id]; le == nil || !le.deadline.Equal(base.Add(1700*time.Millisecond)) {
			t.Fatalf("lease %+v: want it to end a short lease after the election, at 1.7s", le)
		}
	})
	t.Run("confirmed: its whole lease", func(t *testing.T) {
		l, run := setup(t)
		l.s.Clock = at(975 * time.Millisecond)
		if r, err := renewOne(l, worker.Renewal{Attempt: run.Attempts[0].ID, Start: true, Confirming: true, PreStart: true}, "n1"); err != nil || !r.Started {
			t.Fatalf("the start's confirmation: %+v, %v; want started", r, err)
		}
		if got, _ := l.s.FSM.Run(run.ID); !got.Attempts[0].StartConfirmed {
			t.Fatalf("after the confirmation: %+v; want it in the log", got.Attempts[0])
		}
		next := newTerm(t, l, 1100*time.Millisecond)
		next.s.Clock = at(7100 * time.Millisecond)
		next.checkLeases()
		if got, _ := next.s.FSM.Run(run.ID); len(got.Attempts) != 1 || got.Attempts[0].State != jobs.Pending {
			t.Fatalf("within the whole lease from the election: attempts %+v; want it kept", got.Attempts)
		}
		next.s.Clock = at(7101 * time.Millisecond)
		next.checkLeases()
		if got, _ := next.s.FSM.Run(run.ID); got.Attempts[0].State != jobs.Lost || got.Attempts[0].NeverStarted {
			t.Errorf("after the whole lease: attempts %+v; want the first lost, counted as started", got.Attempts)
		}
	})
}

// A start the log must confirm is answered only once the entry is
// applied: one that could not be committed fails (the worker asks again)
// and the lease stays the short one, not started. A renewal that reaches
// a new leader before its recovery keeps what it was given.
func TestLeader_StartConfirmedInLogBeforeTheAnswer(t *testing.T) {
	l, s := shortLeaseLeader(t)
	fr := l.s.Raft.(*fakeRaft)
	run := grantedAhead(t, l, s)
	id := run.Attempts[0].ID
	ask := worker.Renewal{Attempt: id, Start: true, Confirming: true, PreStart: true}

	l.s.Clock = fixedClock{base.Add(975 * time.Millisecond)}
	fr.applyErr = errors.New("no quorum")
	if r, err := renewOne(l, ask, "n1"); err == nil || r.Held {
		t.Fatalf("start not committed: %+v, %v; want an error, and no Held (a worker starts on it)", r, err)
	}
	if le := l.leases[id]; le == nil || le.started || !le.onShort {
		t.Fatalf("lease %+v: want it on the short lease, not started", le)
	}
	fr.applyErr = nil

	// A new term; the worker's renewal reaches it before its recovery.
	next := nextTerm(t, l, time.Second)
	if r, err := renewOne(next, ask, "n1"); err != nil || !r.Started || r.TTL.D() != 6*time.Second {
		t.Fatalf("start committed: %+v, %v; want started, for the whole lease", r, err)
	}
	if got, _ := next.s.FSM.Run(run.ID); !got.Attempts[0].StartConfirmed {
		t.Fatalf("after the answer: %+v; want the confirmation in the log", got.Attempts[0])
	}
	next.recover()
	if le := next.leases[id]; le == nil || !le.started || le.onShort || le.inLog {
		t.Errorf("after the recovery: lease %+v; want the started one the renewal made", le)
	}
}

// failingDispatcher is a worker no dispatch reaches: each fails with
// err. It counts them.
type failingDispatcher struct {
	err   error
	calls atomic.Int32
}

func (d *failingDispatcher) Dispatch(context.Context, string, worker.Assignment) error {
	d.calls.Add(1)
	return d.err
}

func (d *failingDispatcher) DispatchMany(context.Context, string, []worker.Assignment) error {
	d.calls.Add(1)
	return d.err
}

// refused is a worker that is not there: its host refuses the connection.
// unheardOf is one this node's gossip has not heard of yet: the error says
// nothing of the worker.
var (
	refused   = fmt.Errorf("dial tcp 127.0.0.1:1: connect: %w", syscall.ECONNREFUSED)
	unheardOf = errors.New("node n1: no HTTP address in gossip")
)

// A run granted at its fire time to a worker that cannot be reached (a
// node that died as this leader was elected, before gossip said so)
// holds the short lease from its grant, not the whole one: the worker
// never took it, so it cannot have asked for its start, and the run is
// taken over, without a retry, a short lease after the grant.
func TestLeader_UndeliveredAttemptHoldsTheShortLease(t *testing.T) {
	l, s := shortLeaseLeader(t)
	l.s.Dispatcher = &failingDispatcher{err: refused}
	run, err := l.fire(s, base, "schedule", false) // at its fire time
	if err != nil {
		t.Fatal(err)
	}
	id := run.Attempts[0].ID
	if err := pollFor(5*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		le := l.leases[id]
		return le != nil && le.onShort
	}); err != nil {
		t.Fatalf("the lease of an attempt whose dispatch failed: want the short one")
	}
	l.s.Clock = fixedClock{base.Add(time.Second + time.Millisecond)}
	l.checkLeases()
	got, _ := l.s.FSM.Run(run.ID)
	if len(got.Attempts) != 2 || !got.Attempts[0].NeverStarted || got.State != jobs.Pending {
		t.Fatalf("a short lease after the grant: run %s, attempts %+v; want the first never started and a takeover", got.State, got.Attempts)
	}
	l.endTerm() // ends the dispatch retries
}

// A worker a dispatch showed gone (its host refused the connection) is
// chosen last for goneFor, or until it is heard from: a node that died as
// the leader was elected is alive in gossip for seconds, and each run
// granted to it would wait a short lease for its takeover. A failure that
// shows nothing of the worker changes nothing.
func TestLeader_AWorkerShownGoneIsChosenLast(t *testing.T) {
	l, s := shortLeaseLeader(t)
	clk := clocktest.New(base)
	l.goneClock = clk
	l.s.Dispatcher = &failingDispatcher{err: refused}
	if _, err := l.fire(s, base, "schedule", false); err != nil {
		t.Fatal(err)
	}
	if err := pollFor(5*time.Second, func() bool { return l.shunned()["n1"] }); err != nil {
		t.Fatalf("shunned after a refused dispatch to n1: %v; want n1", l.shunned())
	}
	l.endTerm() // ends the dispatch retries, which would mark it again
	l.wg.Wait()
	members := []election.Member{
		{Name: "n1", State: "alive", Meta: election.Meta{HTTPAddr: "127.0.0.1:1"}},
		{Name: "n2", State: "alive", Meta: election.Meta{HTTPAddr: "127.0.0.1:2"}},
	}
	for i := range 20 { // whichever the tie-break would choose
		if w, err := pickWorker(members, nil, s, fmt.Sprintf("r%d", i), "", l.shunned()); err != nil || w != "n2" {
			t.Fatalf("run r%d: %q, %v; want n2, the worker not shown gone", i, w, err)
		}
	}
	// The only worker there is: chosen all the same.
	if w, err := l.chooseWorker(s, "r1", ""); err != nil || w != "n1" {
		t.Errorf("the only worker, shown gone: %q, %v; want it chosen", w, err)
	}
	clk.Advance(goneFor)
	if got := l.shunned(); got["n1"] {
		t.Errorf("after goneFor: shunned %v; want none", got)
	}
	l.heardFrom("n1", refused)
	l.heardFrom("n1", nil)
	if got := l.shunned(); got["n1"] {
		t.Errorf("heard from after a refusal: shunned %v; want none", got)
	}
	l.heardFrom("n1", unheardOf)
	if got := l.shunned(); got["n1"] {
		t.Errorf("after a failure that shows nothing of it: shunned %v; want none", got)
	}
}

// A dispatch's error shows its worker gone when its host refused the
// connection (however deeply wrapped, as net/http wraps it) or gossip
// says it is not alive; not when gossip has not heard of it, nor on a
// timeout.
func TestWorkerGone(t *testing.T) {
	viaHTTP := &url.Error{Op: "Post", URL: "https://127.0.0.1:1/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{viaHTTP, true},
		{fmt.Errorf("dispatch: %w", viaHTTP), true},
		{fmt.Errorf("dispatch: %w", election.ErrNotAlive), true},
		{unheardOf, false},
		{context.DeadlineExceeded, false},
	} {
		if got := workerGone(c.err); got != c.want {
			t.Errorf("workerGone(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// shortLeaseLeader is a test leader of one job with no retries whose
// lease_ttl of 6 s makes its short lease before the start 1 s; n1's
// gossip says it confirms its starts.
func shortLeaseLeader(t *testing.T) (*leader, jobs.Spec) {
	t.Helper()
	s := spec("j", jobs.MisfireLatest, jobs.OverlapAllow) // retries: 0
	s.LeaseTTL = jobs.Duration(6 * time.Second)           // short lease: 1 s
	l, _ := newTestLeader(t, s)
	l.s.Raft.(*fakeRaft).confirms = true
	return l, s
}

// grantedAhead grants s's run due at 1s ahead, at 500ms, as the firing
// loop does, and returns it.
func grantedAhead(t *testing.T, l *leader, s jobs.Spec) jobs.Run {
	t.Helper()
	l.s.Clock = fixedClock{base.Add(500 * time.Millisecond)}
	l.grantAhead([]*fireEntry{due(t, s, base)})
	run, ok := l.s.FSM.Run(jobs.RunID(s.Name, base.Add(time.Second)))
	if !ok || len(run.Attempts) != 1 {
		t.Fatalf("granted ahead: %+v, %v; want one attempt", run, ok)
	}
	return run
}

// nextTerm elects the next term (4) at `elected` and returns its leader
// loop, its leases not yet recovered.
func nextTerm(t *testing.T, l *leader, elected time.Duration) *leader {
	t.Helper()
	l.s.Raft.(*fakeRaft).term = 4
	l.s.Clock = fixedClock{base.Add(elected)}
	res, err := l.s.applyLocalCmd(l.ctx, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: base.Add(elected)}})
	if err != nil {
		t.Fatal(err)
	}
	next := newLeader(l.s, l.ctx)
	t.Cleanup(next.wg.Wait)
	next.electedEpoch, next.electedIndex = res.Epoch, res.Index
	return next
}

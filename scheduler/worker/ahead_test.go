package worker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// A worker given a run granted ahead starts the process at the fire time,
// not before. Its lease is confirmed with the start, by the one renewal
// it sends before the fire time, or at once if the short lease its grant
// began would not last until then (a short lease_ttl), or its clock is
// behind the leader's (the renewals after that one depend on how the
// driven clock meets the keep loop's goroutine, and are not counted).
func TestWorker_GrantedAheadStartsAtTheFireTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		granted time.Duration // after the dispatch, at leaseT0, on the leader's clock
		first   time.Duration // the first renewal, after the dispatch
		only    bool          // and none other before the fire time
	}{
		{"confirmed with the start", testTTL, 0, PreGrantLead - startConfirmLead, true},
		{"a short lease", 1500 * time.Millisecond, 0, 0, false},
		{"its clock behind", testTTL, 50 * time.Millisecond, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every renewal is confirmed.
			script := make([]*renewAnswer, 1000)
			for i := range script {
				script[i] = held
			}
			f := newLeaseFixture(t, script...)
			lead := LeadFor(jobs.Spec{LeaseTTL: jobs.Duration(tc.ttl)})
			fireAt := leaseT0.Add(lead)
			c, marker := runAhead(t, f, tickAhead("", fireAt, leaseT0.Add(tc.granted), tc.ttl))
			if c.State != jobs.Succeeded || c.StartedAt.Before(fireAt) {
				t.Errorf("completion %+v: want succeeded, started at or after the fire time %s", c, fireAt)
			}
			var before []time.Duration
			for _, at := range f.leader.sends() {
				if at < lead {
					before = append(before, at)
				}
			}
			if len(before) == 0 || before[0] != tc.first || (tc.only && len(before) != 1) {
				t.Errorf("renewals sent at %v after the dispatch, before the fire time; want the first at %s (and no other: %v)", before, tc.first, tc.only)
			}
			if _, err := os.Stat(marker); err != nil {
				t.Errorf("the process did not run: %v", err)
			}
		})
	}
}

// A run granted ahead whose lease is lost before its fire time (taken over
// by a newer attempt) never starts its process, and says so: whether the
// worker learns it when it asks to start, or after its lease was
// confirmed at once (a short lease_ttl), from the next renewal or ask
// (which comes first depends on how the driven clock meets the keep
// loop's goroutine: under load the clock passed the keep loop's timer
// before its renewal went out).
// The leader answers every renewal after the first as one that took the
// run over does: a renewal whose answer came after the worker gave up
// waiting for it (a loaded machine) is answered again, as it would be,
// rather than met by silence until a lease the stopped clock never lets
// run out.
func TestWorker_GrantedAheadLostBeforeTheFireTimeNeverStarts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ttl   time.Duration
		first *renewAnswer
	}{
		{"asked to start", testTTL, notYours},
		{"while it waits", 1500 * time.Millisecond, held},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := []*renewAnswer{tc.first}
			for range 100 {
				script = append(script, notYours)
			}
			f := newLeaseFixture(t, script...)
			fireAt := leaseT0.Add(LeadFor(jobs.Spec{LeaseTTL: jobs.Duration(tc.ttl)}))
			c, marker := runAhead(t, f, tickAhead("", fireAt, leaseT0, tc.ttl))
			if c.State != jobs.Lost || !c.StartedAt.IsZero() || !c.NeverStarted || !strings.Contains(c.Error, "never started") {
				t.Errorf("completion %+v: want lost before the start, never started", c)
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Errorf("the process ran (marker: %v)", err)
			}
		})
	}
}

// runAhead has f's worker run a, dispatched at leaseT0, with its process
// touching a marker file (its name replaces a's), and returns its
// completion and the marker's path. The clock stops startSlack after the
// fire time: the process runs in real time, and nothing after its start
// needs the clock to move. The driven clock may jump to the worker's next
// timer while a renewal is still on its way, so the fire time should be
// less than the short lease before the start (jobs.Spec.PreStartLease)
// after the grant, as a real grant ahead is.
func runAhead(t *testing.T, f *leaseFixture, a Assignment) (replicated.Completion, string) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "ran")
	a.Spec.Env = map[string]string{"MARKER": marker}
	if err := f.w.Accept(a); err != nil {
		t.Fatal(err)
	}
	return f.completionBy(t, a.StartAt().Add(startSlack)), marker
}

// startSlack is how far past the fire time a driven clock may go: a
// start request that met a renewal still on its way (a loaded machine)
// is asked again after a backoff of 50 ms and more, which a clock
// stopped at the fire time never reaches (the test then hung for 30 s).
// Less than the short lease before the start, so the lease cannot run
// out in fake time meanwhile.
const startSlack = 400 * time.Millisecond

// tickAhead is a scheduled attempt for fireAt, granted at granted with a
// lease of ttl, whose process touches marker.
func tickAhead(marker string, fireAt, granted time.Time, ttl time.Duration) Assignment {
	return Assignment{
		Run:     jobs.Run{ID: "tick@x", Job: "tick", Trigger: "schedule", ScheduledAt: fireAt},
		Spec:    jobs.Spec{Name: "tick", Shell: `touch "$MARKER"`, Env: map[string]string{"MARKER": marker}, Timeout: jobs.Duration(time.Minute), LeaseTTL: jobs.Duration(ttl)},
		Attempt: jobs.Attempt{ID: "tick@x.1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 1, Seq: 1}, GrantedAt: granted},
	}
}

// A worker that shuts down while a run granted ahead waits for its fire
// time reports it lost without starting it, so a job with retries gets
// another attempt elsewhere.
func TestWorker_GrantedAheadShutdownBeforeTheFireTime(t *testing.T) {
	f := newLeaseFixture(t, held, held, held)
	marker := filepath.Join(t.TempDir(), "ran")
	a := tickAhead(marker, leaseT0.Add(20*time.Second), leaseT0, testTTL)
	if err := f.w.Accept(a); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.w.LeaseStates()[a.Attempt.ID] != LeaseHeld {
		if time.Now().After(deadline) {
			t.Fatalf("lease never held: %v", f.w.LeaseStates())
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.w.Close(context.Background()) }()
	var c replicated.Completion
	select {
	case c = <-f.leader.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no completion within 30s")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if c.State != jobs.Lost || !c.StartedAt.IsZero() || !c.NeverStarted || !strings.Contains(c.Error, "before the fire time") {
		t.Errorf("completion %+v: want lost before the fire time, never started", c)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the process ran (marker: %v)", err)
	}
}

// A worker that shuts down while a run granted ahead waits to have its
// lease confirmed with its start (no renewal sent yet) reports it lost
// before the fire time, never started, as it does when it waits with its
// lease confirmed.
func TestWorker_GrantedAheadShutdownBeforeItsAsk(t *testing.T) {
	f := newLeaseFixture(t) // no renewal may be sent
	marker := filepath.Join(t.TempDir(), "ran")
	a := tickAhead(marker, leaseT0.Add(PreGrantLead), leaseT0, testTTL)
	if err := f.w.Accept(a); err != nil {
		t.Fatal(err)
	}
	// The clock never moves: the attempt waits for its ask's timer.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.clock.WaitTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := f.leader.completion(t)
	if c.State != jobs.Lost || !c.NeverStarted || !strings.Contains(c.Error, "before the fire time") {
		t.Errorf("completion %+v: want lost before the fire time, never started", c)
	}
	if sends := f.leader.sends(); len(sends) != 0 {
		t.Errorf("renewals sent at %v; want none", sends)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the process ran (marker: %v)", err)
	}
}

// stallingStore answers no establish until the caller gives up; entered
// is signalled when one arrives.
type stallingStore struct {
	fencedstore.Store
	entered chan struct{}
}

func (s stallingStore) Establish(ctx context.Context, _ fencedstore.EstablishRequest) (fencedstore.Result, error) {
	s.entered <- struct{}{}
	<-ctx.Done()
	return fencedstore.Result{}, ctx.Err()
}

// A worker that shuts down while it establishes an attempt's token (the
// store slow to answer) reports the attempt lost and never started, as
// when it shuts down waiting for the fire time: nothing ran, so the run
// gets another attempt elsewhere without using a retry. CI saw it
// reported failed instead, and a job without retries lost its run.
func TestWorker_ShutdownWhileEstablishingNeverStarted(t *testing.T) {
	store := stallingStore{entered: make(chan struct{}, 1)}
	l := holdingLeader{done: make(chan replicated.Completion, 1)}
	w := &Worker{ID: "w1", Store: store, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	a := tickAhead(marker, time.Now().Add(20*time.Second), time.Now(), testTTL)
	a.Run.Output = "reports/tick.txt"
	if err := w.Accept(a); err != nil {
		t.Fatal(err)
	}
	select {
	case <-store.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no establish within 30s")
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close(context.Background()) }()
	c := l.completion(t)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if c.State != jobs.Lost || !c.NeverStarted || !c.StartedAt.IsZero() || !strings.Contains(c.Error, "shutting down before the start") {
		t.Errorf("completion %+v: want lost while shutting down, never started", c)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the process ran (marker: %v)", err)
	}
}

// A run granted a lead ahead and dispatched on time has its lease
// confirmed with its start when the start's ask comes at least a third
// of the grant's short lease before that lease ends, as a renewal must:
// for a lease_ttl of 2.2 s or more with the least start lead, and for
// every lease_ttl once the worker asks 100 ms ahead (its asks were slow,
// startlead.go). Otherwise it confirms at once, as does a worker whose
// clock reads earlier than the grant's time.
func TestLeaseClient_ConfirmAtStartByLeaseTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl, lead time.Duration
		withStart bool
	}{
		{jobs.MinLeaseTTL, startConfirmLead, false}, {1500 * time.Millisecond, startConfirmLead, false}, {2 * time.Second, startConfirmLead, false},
		{2200 * time.Millisecond, startConfirmLead, true}, {3 * time.Second, startConfirmLead, true}, {30 * time.Second, startConfirmLead, true},
		{jobs.MinLeaseTTL, maxStartLead, true}, {1500 * time.Millisecond, maxStartLead, true}, {2 * time.Second, maxStartLead, true},
		{30 * time.Second, maxStartLead, true},
	} {
		spec := jobs.Spec{LeaseTTL: jobs.Duration(tc.ttl)}
		granted := leaseT0
		fireAt := granted.Add(LeadFor(spec))
		c := &leaseClient{short: spec.PreStartLease(), startAsk: fireAt.Add(-tc.lead)}
		if got := c.confirmAtStart(granted, granted); got != tc.withStart {
			t.Errorf("lease_ttl %s, lead %s: confirmed with the start %v, want %v (ask %s after the grant, short lease %s)", tc.ttl, tc.lead, got, tc.withStart, c.startAsk.Sub(granted), c.short)
		}
		if left := granted.Add(c.short).Sub(c.startAsk); tc.withStart && left < c.short/3 {
			t.Errorf("lease_ttl %s, lead %s: the ask comes %s before the short lease %s ends; want at least a third of it", tc.ttl, tc.lead, left, c.short)
		}
		if c.confirmAtStart(granted, granted.Add(-time.Millisecond)) {
			t.Errorf("lease_ttl %s: a clock behind the grant's time waits for the start; want confirmed at once", tc.ttl)
		}
	}
}

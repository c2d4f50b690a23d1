package worker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Before its start, a lease granted ahead is the short one: the work may
// start only within it of the latest confirmed renewal; once started, the
// lease is the whole TTL, counted from that renewal.
func TestLeaseClient_BeginWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   time.Duration // after the one confirmed renewal, sent at leaseT0
		ok   bool
	}{
		{"at once", 0, true},
		{"within the short lease", 600 * time.Millisecond, true},
		{"the instant it ends", time.Second, false},
		{"after a pause past it", 3 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLeaseFixture(t, held)
			f.lc.short = time.Second
			f.lc.renewOnce(t.Context())
			if got := f.lc.beginWork(leaseT0.Add(tc.at)); got != tc.ok {
				t.Fatalf("beginWork %s after the confirmation = %v, want %v", tc.at, got, tc.ok)
			}
			if !tc.ok {
				return
			}
			// Started: the whole TTL from the confirmation.
			until, st := f.lc.standing()
			if want := leaseT0.Add(testTTL); !until.Equal(want) || st != LeaseHeld {
				t.Errorf("after the start: valid until %s (%s), want %s, held", until, st, want)
			}
			f.lc.evaluate(leaseT0.Add(testTTL / 2))
			if got := f.lc.State(); got != LeaseHeld {
				t.Errorf("half the TTL after a started lease's confirmation: %s, want held", got)
			}
		})
	}
}

// A worker whose renewals stop being confirmed while a run granted ahead
// waits for its fire time (it is paused, or cut off from the leader)
// gives the run up when its short lease runs out: it never starts the
// process, says so, and sends every renewal before that for the short
// lease.
func TestWorker_GrantedAheadShortLeaseRunsOut(t *testing.T) {
	f := newLeaseFixture(t, held) // then no leader answers
	marker := filepath.Join(t.TempDir(), "ran")
	// A lease_ttl of 1.5s: its short lease of 500 ms would run out before
	// the start's ask, so the lease is confirmed at once and renewed.
	ttl := 1500 * time.Millisecond
	fireAt := leaseT0.Add(LeadFor(jobs.Spec{LeaseTTL: jobs.Duration(ttl)}))
	a := tickAhead(marker, fireAt, leaseT0, ttl)
	if err := f.w.Accept(a); err != nil {
		t.Fatal(err)
	}
	c := f.completionBy(t, leaseT0.Add(time.Minute))
	if c.State != jobs.Lost || !c.StartedAt.IsZero() || !c.NeverStarted {
		t.Errorf("completion %+v: want lost, never started", c)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the process ran (marker: %v)", err)
	}
	short := a.Spec.PreStartLease()
	if ended := c.EndedAt.Sub(leaseT0); ended > 2*short {
		t.Errorf("gave the run up %s after the grant; want within its short lease %s of the last confirmed renewal", ended, short)
	}
	f.leader.mu.Lock()
	pre := slices.Clone(f.leader.pre)
	f.leader.mu.Unlock()
	if len(pre) < 2 || slices.Contains(pre, false) {
		t.Errorf("renewals' PreStart %v: want every one for the short lease", pre)
	}
}

// A worker that never gets its lease confirmed gives the attempt up
// within the short lease of a run granted ahead, counted from its first
// renewal (the start's ask, for a run whose grant's short lease lasts
// until then), and says it never started it, so the run is taken over
// without using a retry.
func TestWorker_LeaseNeverConfirmedNeverStarted(t *testing.T) {
	f := newLeaseFixture(t) // no leader answers
	marker := filepath.Join(t.TempDir(), "ran")
	a := tickAhead(marker, leaseT0.Add(PreGrantLead), leaseT0, testTTL)
	if err := f.w.Accept(a); err != nil {
		t.Fatal(err)
	}
	c := f.completionBy(t, leaseT0.Add(time.Minute))
	if c.State != jobs.Lost || !c.NeverStarted || !strings.Contains(c.Error, "lease not confirmed") {
		t.Errorf("completion %+v: want lost, lease not confirmed, never started", c)
	}
	ask := PreGrantLead - startConfirmLead
	if ended := c.EndedAt.Sub(leaseT0); ended > ask+a.Spec.PreStartLease() {
		t.Errorf("gave the attempt up %s after the grant; want within its short lease %s of the start's ask, %s after the grant", ended, a.Spec.PreStartLease(), ask)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the process ran (marker: %v)", err)
	}
}

// A SUSPECT before the start is counted on the worker but is not sent to
// the leader as a note (a Raft entry): the short lease makes it as
// frequent as renewals are slow.
func TestLeaseClient_SuspectBeforeTheStartIsNotANote(t *testing.T) {
	f := newLeaseFixture(t, held)
	f.lc.short = time.Second
	f.lc.renewOnce(t.Context())
	f.lc.evaluate(leaseT0.Add(700 * time.Millisecond))
	if got := f.lc.State(); got != LeaseSuspect {
		t.Fatalf("700ms into a 1s lease before the start: %s, want suspect", got)
	}
	if got := f.obs.seen(); !slices.Equal(got, []string{jobs.EventSuspect}) {
		t.Errorf("transitions seen %v, want one suspect", got)
	}
	f.w.Close(t.Context()) // waits for notes in flight
	f.leader.mu.Lock()
	defer f.leader.mu.Unlock()
	if len(f.leader.noted) != 0 {
		t.Errorf("the leader was told %v, want nothing", f.leader.noted)
	}
}

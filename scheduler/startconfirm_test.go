package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

func TestDecideNeverStarted(t *testing.T) {
	tok := func(epoch, seq uint64) jobs.Attempt { return jobs.Attempt{Token: jobs.Fence{Epoch: epoch, Seq: seq}} }
	free := jobs.Run{Attempts: []jobs.Attempt{{NeverStarted: true}, {NeverStarted: true}}}
	full := jobs.Run{Attempts: []jobs.Attempt{{NeverStarted: true}, {NeverStarted: true}, {NeverStarted: true}}}
	for _, tc := range []struct {
		name                   string
		r                      jobs.Run
		a                      jobs.Attempt
		entry, elected, eIndex uint64
		want                   bool
	}{
		{"granted by this term's leader after its election", jobs.Run{}, tok(4, 20), 4, 4, 10, true},
		{"granted by an earlier leader", jobs.Run{}, tok(3, 20), 4, 4, 10, false},
		{"granted before this term's election entry", jobs.Run{}, tok(4, 9), 4, 4, 10, false},
		{"granted at the election entry's index", jobs.Run{}, tok(4, 10), 4, 4, 10, false},
		{"an entry of a term with no election entry yet", jobs.Run{}, tok(4, 20), 5, 4, 10, false},
		{"the run has had fewer than the most", free, tok(4, 20), 4, 4, 10, true},
		{"the run has had the most already", full, tok(4, 20), 4, 4, 10, false},
	} {
		if got := DecideNeverStarted(tc.r, tc.a, tc.entry, tc.elected, tc.eIndex); got != tc.want {
			t.Errorf("%s: DecideNeverStarted = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := CountedAttempts(jobs.Run{Attempts: append(full.Attempts, jobs.Attempt{})}); n != 1 {
		t.Errorf("CountedAttempts of three never started and one other = %d, want 1", n)
	}
}

// electedAt applies term's election entry at index, as a leader loop
// commits it before it grants.
func electedAt(t *testing.T, f *FSM, term, index uint64) {
	t.Helper()
	b, err := encodeEntry(command{Op: opElected, Elected: &electedCmd{Node: "test-leader", At: t0}})
	if err != nil {
		t.Fatal(err)
	}
	if res := applyRaw(t, f, term, index, b); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// An expiry on the granting leader's word that the attempt never started
// does not count against the job's retries: a job with none gets its
// takeover. The word counts only from the leader that granted the
// attempt after its election entry, only from log version 5, and only a
// few times a run.
func TestFSM_NeverStartedAttemptDoesNotCountAgainstRetries(t *testing.T) {
	setup := func(t *testing.T) (*FSM, jobs.Run) {
		f := NewFSM()
		spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true"} // retries: 0
		applyAt(t, f, 1, 1, command{Op: opSetJobs, SetJobs: &setJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
		electedAt(t, f, 2, 9)
		return f, applyAt(t, f, 2, 10, grant("report", t0)).Run
	}
	expire := func(id string, never bool) command {
		return command{Op: opExpire, Expire: &expireCmd{Attempt: id, State: jobs.Lost, Reason: "lease expired", Worker: "w2", At: t0, NeverStarted: never}}
	}

	t.Run("the granting leader's word", func(t *testing.T) {
		f, run := setup(t)
		res := applyAt(t, f, 2, 11, expire(run.Attempts[0].ID, true))
		if res.Err != nil || len(res.Run.Attempts) != 2 || !res.Run.Attempts[0].NeverStarted || res.Run.Attempts[1].Worker != "w2" || res.Run.State != jobs.Pending {
			t.Fatalf("expiry of a never started attempt: %v, run %s with attempts %+v; want it marked, and a takeover on w2", res.Err, res.Run.State, res.Run.Attempts)
		}
		// The takeover is the run's one counted attempt: its own expiry
		// (it started) ends the run.
		res = applyAt(t, f, 2, 12, expire(res.Run.Attempts[1].ID, false))
		if res.Err != nil || len(res.Run.Attempts) != 2 || res.Run.State != jobs.Lost {
			t.Errorf("expiry of the takeover: %v, run %s with %d attempts; want lost, no third", res.Err, res.Run.State, len(res.Run.Attempts))
		}
	})
	t.Run("a later leader's word", func(t *testing.T) {
		f, run := setup(t)
		electedAt(t, f, 3, 11)
		res := applyAt(t, f, 3, 12, expire(run.Attempts[0].ID, true))
		if res.Err != nil || len(res.Run.Attempts) != 1 || res.Run.Attempts[0].NeverStarted || res.Run.State != jobs.Lost {
			t.Errorf("a later term's expiry: %v, run %s with attempts %+v; want counted: lost, no takeover", res.Err, res.Run.State, res.Run.Attempts)
		}
	})
	t.Run("a version 4 entry", func(t *testing.T) {
		f, run := setup(t)
		b, err := encodeEntry(expire(run.Attempts[0].ID, true))
		if err != nil {
			t.Fatal(err)
		}
		// encodeEntry writes this binary's version: write version 4 by hand.
		b = []byte(strings.Replace(string(b), fmt.Sprintf(`"v":%d`, LogVersion), `"v":4`, 1))
		res := applyRaw(t, f, 2, 11, b)
		if res.Err != nil || len(res.Run.Attempts) != 1 || res.Run.Attempts[0].NeverStarted {
			t.Errorf("a version 4 expiry: %v, attempts %+v; want counted", res.Err, res.Run.Attempts)
		}
	})
	t.Run("at most maxNeverStarted a run", func(t *testing.T) {
		f, run := setup(t)
		index := uint64(11)
		for range maxNeverStarted + 1 {
			latest, _ := run.Latest()
			run = applyAt(t, f, 2, index, expire(latest.ID, true)).Run
			index++
		}
		if len(run.Attempts) != maxNeverStarted+1 || CountedAttempts(run) != 1 || run.State != jobs.Lost {
			t.Errorf("after %d expiries never started: run %s with %d attempts, %d counted; want lost with %d, 1 counted", maxNeverStarted+1, run.State, len(run.Attempts), CountedAttempts(run), maxNeverStarted+1)
		}
	})
}

// The leader takes a lease that ran out for an attempt that never
// started when its worker confirms starts and never asked for this one;
// once it confirmed the start, the expiry counts.
func TestLeader_ExpiryWithoutAStartConfirmationIsNotCounted(t *testing.T) {
	s := spec("j", jobs.MisfireLatest, jobs.OverlapAllow) // retries: 0
	s.LeaseTTL = jobs.Duration(time.Second)
	l, fsm := newTestLeader(t, s)
	run, err := l.fire(s, base.Add(time.Second), "schedule", false)
	if err != nil {
		t.Fatal(err)
	}
	runOut := func() {
		l.mu.Lock()
		for _, le := range l.leases {
			le.deadline = base.Add(-time.Millisecond)
		}
		l.mu.Unlock()
		l.checkLeases()
	}
	// The worker confirmed its lease, waiting for the fire time, and died.
	if r, _ := l.renew(Renewal{Attempt: run.Attempts[0].ID, Confirming: true}, "n1"); !r.Held || r.Started {
		t.Fatalf("renewal without a start: %+v; want held, not started", r)
	}
	runOut()
	got, _ := fsm.Run(run.ID)
	if len(got.Attempts) != 2 || !got.Attempts[0].NeverStarted || got.State != jobs.Pending {
		t.Fatalf("after the lease ran out unstarted: run %s, attempts %+v; want the first never started and a takeover", got.State, got.Attempts)
	}
	if r, _ := l.renew(Renewal{Attempt: got.Attempts[0].ID, Start: true, Confirming: true}, "n1"); r.Held || r.Started {
		t.Errorf("the expired attempt's start was confirmed: %+v", r)
	}
	// The takeover's worker starts it, then dies: that expiry counts.
	if r, _ := l.renew(Renewal{Attempt: got.Attempts[1].ID, Start: true, Confirming: true}, "n1"); !r.Held || !r.Started {
		t.Fatalf("the takeover's start: %+v; want held and started", r)
	}
	runOut()
	got, _ = fsm.Run(run.ID)
	if len(got.Attempts) != 2 || got.Attempts[1].NeverStarted || got.State != jobs.Lost {
		t.Errorf("after the started takeover's lease ran out: run %s, attempts %+v; want lost, counted", got.State, got.Attempts)
	}

	// A worker that died before its first renewal said nothing; its
	// node's gossip says whether it confirms starts.
	for _, confirms := range []bool{false, true} {
		l.s.Raft.(*fakeRaft).confirms = confirms
		run, err := l.fire(s, base.Add(time.Duration(2+btoi(confirms))*time.Second), "schedule", false)
		if err != nil {
			t.Fatal(err)
		}
		runOut()
		got, _ := fsm.Run(run.ID)
		if got.Attempts[0].NeverStarted != confirms || len(got.Attempts) != 1+btoi(confirms) {
			t.Errorf("gossip says confirms starts %v, no renewal: attempts %+v; want never started %v", confirms, got.Attempts, confirms)
		}
	}

	// An attempt granted before the leader loop's election entry may
	// have had its start confirmed by an earlier loop: its expiry counts.
	run, err = l.fire(s, base.Add(5*time.Second), "schedule", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.s.applyLocalCmd(t.Context(), command{Op: opElected, Elected: &electedCmd{Node: "n1", At: base}}); err != nil {
		t.Fatal(err)
	}
	runOut()
	got, _ = fsm.Run(run.ID)
	if len(got.Attempts) != 1 || got.Attempts[0].NeverStarted || strings.Contains(got.Attempts[0].Error, "never started") || got.State != jobs.Lost {
		t.Errorf("an attempt granted before the election entry: run %s, attempts %+v; want lost, counted, and not said to be never started", got.State, got.Attempts)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// startLeader takes renewals in batches; it answers the renewals that ask
// for a start with an error (no leader) until refuse of them were
// answered, or for good if refuse < 0, then confirms them.
type startLeader struct {
	holdingLeader
	refuse int

	mu          sync.Mutex
	asked       []time.Time // when each start renewal arrived
	confirmedAt time.Time
}

func (l *startLeader) RenewMany(_ context.Context, _ string, rs []Renewal) ([]RenewReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]RenewReply, len(rs))
	for i, r := range rs {
		if r.Start {
			l.asked = append(l.asked, time.Now())
			if l.refuse < 0 || len(l.asked) <= l.refuse {
				return nil, errors.New("no leader")
			}
			if l.confirmedAt.IsZero() {
				l.confirmedAt = time.Now()
			}
		}
		out[i] = RenewReply{Held: true, TTL: jobs.Duration(time.Second), Started: r.Start}
	}
	return out, nil
}

// A worker given a run granted ahead asks the leader to confirm its start
// just before the fire time, and starts the process only once a leader
// has: with no leader to confirm it, never (its lease runs out).
func TestWorker_StartsOnlyOnceTheLeaderConfirms(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse int
		want   jobs.State
	}{
		{"confirmed after three tries", 3, jobs.Succeeded},
		{"never confirmed", -1, jobs.Lost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &startLeader{holdingLeader: holdingLeader{done: make(chan Completion, 1)}, refuse: tc.refuse}
			w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
			if err := w.Open(); err != nil {
				t.Fatal(err)
			}
			defer w.Close(context.Background())
			marker := filepath.Join(t.TempDir(), "ran")
			fireAt := time.Now().Add(300 * time.Millisecond)
			if err := w.Accept(tickAhead(marker, fireAt, time.Now(), time.Second)); err != nil {
				t.Fatal(err)
			}
			c := l.completion(t)
			l.mu.Lock()
			defer l.mu.Unlock()
			if len(l.asked) == 0 || l.asked[0].Before(fireAt.Add(-startConfirmLead)) {
				t.Fatalf("start renewals at %v; want the first no earlier than %s before the fire time %s", l.asked, startConfirmLead, fireAt)
			}
			_, err := os.Stat(marker)
			switch {
			case c.State != tc.want:
				t.Errorf("completion %+v: want %s", c, tc.want)
			case tc.want == jobs.Succeeded && (c.StartedAt.Before(l.confirmedAt) || c.StartedAt.Before(fireAt) || err != nil):
				t.Errorf("started at %s (marker: %v); want after the confirmation at %s and the fire time %s", c.StartedAt, err, l.confirmedAt, fireAt)
			case tc.want == jobs.Lost && (!c.StartedAt.IsZero() || !os.IsNotExist(err)):
				t.Errorf("completion %+v, marker %v: want never started", c, err)
			}
		})
	}
}

// The leader confirms a start only while nothing can have taken the run
// from the worker: not while the attempt's expiry as never started is on
// its way to the log, and not from a loop whose election entry is no
// longer the last one (a newer leader's grants may be the ones asked
// about). A renewal from a worker that does not confirm starts counts as
// a start: such a worker may start on any renewal answered Held.
func TestLeader_ConfirmsAStartOnlyWhileItsTermLasts(t *testing.T) {
	s := spec("j", jobs.MisfireLatest, jobs.OverlapAllow) // retries: 0
	s.LeaseTTL = jobs.Duration(time.Second)
	l, fsm := newTestLeader(t, s)
	l.s.Raft.(*fakeRaft).confirms = true
	fire := func(at time.Duration) jobs.Attempt {
		t.Helper()
		run, err := l.fire(s, base.Add(at), "schedule", false)
		if err != nil {
			t.Fatal(err)
		}
		return run.Attempts[0]
	}

	a := fire(time.Second)
	l.mu.Lock()
	l.unstarted[a.ID] = true // checkLeases took it; its expiry is not yet applied
	l.mu.Unlock()
	if r, err := l.renew(Renewal{Attempt: a.ID, Start: true, Confirming: true}, "n1"); err != nil || r.Held || r.Started {
		t.Errorf("a start asked while the expiry is pending: %+v, %v; want a definite no", r, err)
	}
	if r, err := l.renew(Renewal{Attempt: a.ID, Confirming: true}, "n1"); err != nil || !r.Held {
		t.Errorf("a plain renewal while the expiry is pending: %+v, %v; want held, as before", r, err)
	}
	// A renewal without Confirming may be followed by a start: refused.
	if r, err := l.renew(Renewal{Attempt: a.ID}, "n1"); err != nil || r.Held {
		t.Errorf("an older worker's renewal while the expiry is pending: %+v, %v; want a definite no", r, err)
	}

	// An older worker's renewal, without Confirming: its lease running
	// out proves nothing about a start.
	b := fire(2 * time.Second)
	if r, err := l.renew(Renewal{Attempt: b.ID}, "n1"); err != nil || !r.Held {
		t.Fatalf("an older worker's renewal: %+v, %v", r, err)
	}
	l.mu.Lock()
	l.leases[b.ID].deadline = base.Add(-time.Millisecond)
	l.mu.Unlock()
	l.checkLeases()
	if got, _ := fsm.Run(jobs.RunID("j", base.Add(2*time.Second))); len(got.Attempts) != 1 || got.Attempts[0].NeverStarted || got.State != jobs.Lost {
		t.Errorf("the older worker's lease ran out: run %s, attempts %+v; want lost, counted", got.State, got.Attempts)
	}

	// A newer election entry: this loop's term is over.
	c := fire(3 * time.Second)
	if _, err := l.s.applyLocalCmd(t.Context(), command{Op: opElected, Elected: &electedCmd{Node: "n2", At: base}}); err != nil {
		t.Fatal(err)
	}
	if r, err := l.renew(Renewal{Attempt: c.ID, Start: true, Confirming: true}, "n1"); !errors.Is(err, jobs.ErrNotLeader) || r.Held {
		t.Errorf("a start asked of a loop whose term is over: %+v, %v; want %v", r, err, jobs.ErrNotLeader)
	}
}

// A worker that gives an attempt up before starting it (it shuts down
// before the fire time) says so in its completion: the attempt does not
// count against the job's retries. Only the attempt's own worker's word
// counts, only from log version 5, and not once the lease was taken.
func TestFSM_WorkersWordThatItNeverStarted(t *testing.T) {
	setup := func(t *testing.T) (*FSM, jobs.Run) {
		f := NewFSM()
		spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true"} // retries: 0
		applyAt(t, f, 1, 1, command{Op: opSetJobs, SetJobs: &setJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
		return f, applyAt(t, f, 2, 10, grant("report", t0)).Run
	}
	started := func(id string) command {
		return command{Op: opStart, Start: &startCmd{Attempt: id, At: t0}}
	}
	gaveUp := func(id, node string) command {
		return command{Op: opComplete, Complete: &Completion{Attempt: id, Node: node, State: jobs.Lost, Error: "worker shutting down before the fire time", EndedAt: t0, NeverStarted: true}}
	}
	for _, tc := range []struct {
		name    string
		node    string
		before  func(id string) command // applied before the completion
		version int
		free    bool
	}{
		{"its own worker", "w1", nil, LogVersion, true},
		{"another node", "w2", nil, LogVersion, false},
		{"after the lease was taken", "w1", func(id string) command {
			return command{Op: opExpire, Expire: &expireCmd{Attempt: id, State: jobs.Lost, Reason: "lease expired", At: t0}}
		}, LogVersion, false},
		{"after its start was recorded", "w1", started, LogVersion, false},
		{"a version 4 entry", "w1", nil, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, run := setup(t)
			id := run.Attempts[0].ID
			if tc.before != nil {
				applyAt(t, f, 2, 11, tc.before(id))
			}
			b, err := encodeEntry(gaveUp(id, tc.node))
			if err != nil {
				t.Fatal(err)
			}
			b = []byte(strings.Replace(string(b), fmt.Sprintf(`"v":%d`, LogVersion), fmt.Sprintf(`"v":%d`, tc.version), 1))
			res := applyRaw(t, f, 2, 12, b)
			a := res.Run.Attempts[0]
			if res.Err != nil || a.NeverStarted != tc.free || AwaitsRetry(res.Run) != tc.free {
				t.Errorf("%v, run %s, attempt never started %v; want never started and awaiting its retry: %v", res.Err, res.Run.State, a.NeverStarted, tc.free)
			}
		})
	}
}

package scheduler

import (
	"container/heap"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// fakeRaft applies commands to the FSM at once, as a one-node Raft whose
// log never fails; it is enough to test the leader's decisions.
type fakeRaft struct {
	fsm      *fsm.FSM
	follower bool // IsLeader says no (Apply still applies)
	confirms bool // n1's gossip says it confirms starts
	// oldRelease: n1's gossip does not say it holds short leases before
	// starts (a release before them).
	oldRelease bool
	// maxAttempts is n1's node.max_attempts (0: the default).
	maxAttempts int
	// term is the Raft term of the entries Apply writes (0: 3).
	term uint64
	// applyErr, if set, is what Apply returns, applying nothing (an
	// entry that could not be committed).
	applyErr error
	mu       sync.Mutex
	index    uint64
	// heads are the first bytes of every entry applied, and sizes their
	// lengths.
	heads []string
	sizes []int
}

func (r *fakeRaft) ID() string                         { return "n1" }
func (r *fakeRaft) IsLeader() bool                     { return !r.follower }
func (r *fakeRaft) LeadershipChanged() <-chan struct{} { return nil }
func (r *fakeRaft) Barrier(context.Context) error      { return nil }
func (r *fakeRaft) Members() []election.Member {
	return []election.Member{{Name: "n1", State: "alive", Meta: election.Meta{HTTPAddr: "127.0.0.1:1", ConfirmsStarts: r.confirms, PreStartLeases: !r.oldRelease, MaxAttempts: r.maxAttempts}}}
}
func (r *fakeRaft) Apply(ctx context.Context, cmd []byte) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applyErr != nil {
		return nil, r.applyErr
	}
	r.index++
	r.heads, r.sizes = append(r.heads, string(cmd[:min(len(cmd), 64)])), append(r.sizes, len(cmd))
	term := r.term
	if term == 0 {
		term = 3
	}
	return r.fsm.Apply(&raft.Log{Term: term, Index: r.index, Type: raft.LogCommand, Data: cmd}), nil
}

// recordingDispatcher remembers assignments.
type recordingDispatcher struct {
	mu   sync.Mutex
	sent []worker.Assignment
}

func (d *recordingDispatcher) Dispatch(ctx context.Context, workerID string, a worker.Assignment) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent = append(d.sent, a)
	return nil
}

// DispatchMany remembers each assignment of the batch, as delivered.
func (d *recordingDispatcher) DispatchMany(ctx context.Context, workerID string, as []worker.Assignment) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent = append(d.sent, as...)
	return nil
}

// newTestLeader returns a leader term over a fake one-node cluster with
// the given job set.
func newTestLeader(t testing.TB, specs ...jobs.Spec) (*leader, *fsm.FSM) {
	t.Helper()
	sm := fsm.NewFSM()
	s := New(&fakeRaft{fsm: sm}, sm)
	s.Clock = fixedClock{base}
	s.Dispatcher = &recordingDispatcher{}
	s.Logger = slogDiscard()
	ctx, cancel := context.WithCancel(context.Background())
	l := newLeader(s, ctx)
	l.endTerm = cancel
	t.Cleanup(func() { cancel(); l.wg.Wait() })
	// As run does: the term's election entry precedes its grants.
	res, err := s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: base}})
	if err != nil {
		t.Fatal(err)
	}
	l.electedEpoch, l.electedIndex = res.Epoch, res.Index
	if _, err := s.SetJobs(ctx, specs, "test", nil); err != nil {
		t.Fatal(err)
	}
	return l, sm
}

func spec(name, misfire, overlap string) jobs.Spec {
	return jobs.Spec{Name: name, Schedules: []string{"* * * * * *"}, Shell: "true", Misfire: misfire, Overlap: overlap,
		CatchupWindow: jobs.Duration(10 * time.Second)}
}

// due builds the queue entry of a job whose fire times after `after` have
// not been handled.
func due(t *testing.T, s jobs.Spec, after time.Time) *fireEntry {
	t.Helper()
	s.Normalize()
	sched, err := s.Schedule()
	if err != nil {
		t.Fatal(err)
	}
	e := &fireEntry{name: s.Name, jitter: s.Jitter, sched: sched, after: after}
	e.setNext(sched.Next(after))
	return e
}

var base = time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)

// fixedClock says it is always the same time; the tests pass `now` to the
// leader's decisions themselves.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                      { return c.t }
func (c fixedClock) NewTimer(d time.Duration) jobs.Timer { return jobs.SystemClock{}.NewTimer(d) }

func TestLeader_MisfirePolicies(t *testing.T) {
	cases := []struct {
		misfire     string
		schedule    string
		now         time.Time
		wantGranted []string
		wantSkipped int
		wantReason  string
	}{
		// Five fire times due, :01 to :05.
		{jobs.MisfireLatest, "* * * * * *", base.Add(5*time.Second + 300*time.Millisecond), []string{"09:00:05"}, 4, "superseded by a later fire time"},
		{jobs.MisfireAll, "* * * * * *", base.Add(5*time.Second + 300*time.Millisecond), []string{"09:00:01", "09:00:02", "09:00:03", "09:00:04", "09:00:05"}, 0, ""},
		{jobs.MisfireSkip, "* * * * * *", base.Add(5*time.Second + 300*time.Millisecond), []string{"09:00:05"}, 4, "missed (misfire: skip)"},
		// :05 and :10 due, the latest itself late beyond the grace: nothing runs.
		{jobs.MisfireSkip, "*/5 * * * * *", base.Add(10*time.Second + jobs.MisfireGrace + 500*time.Millisecond), nil, 2, "missed (misfire: skip)"},
	}
	for _, tc := range cases {
		t.Run(tc.misfire, func(t *testing.T) {
			js := spec("j", tc.misfire, jobs.OverlapAllow)
			js.Schedules = []string{tc.schedule}
			l, sm := newTestLeader(t, js)
			e := due(t, js, base)
			l.handleDue(e, tc.now)
			var granted []string
			for _, r := range sm.Runs(fsm.RunFilter{}) {
				if r.State == jobs.Pending {
					granted = append([]string{r.ScheduledAt.Format("15:04:05")}, granted...)
				}
			}
			if strings.Join(granted, ",") != strings.Join(tc.wantGranted, ",") {
				t.Errorf("granted %v, want %v", granted, tc.wantGranted)
			}
			skipped := 0
			for _, k := range sm.Skips("j") {
				skipped += k.Count
				if !strings.Contains(k.Reason, tc.wantReason) {
					t.Errorf("skip reason %q, want it to say %q", k.Reason, tc.wantReason)
				}
			}
			if skipped != tc.wantSkipped {
				t.Errorf("skipped %d fire times, want %d (%+v)", skipped, tc.wantSkipped, sm.Skips("j"))
			}
		})
	}
}

func TestLeader_CatchupWindow(t *testing.T) {
	l, sm := newTestLeader(t, spec("j", jobs.MisfireAll, jobs.OverlapAllow))
	// 60 fire times missed; the window is 10s: 50 are too old.
	now := base.Add(60*time.Second + 100*time.Millisecond)
	l.handleDue(due(t, spec("j", jobs.MisfireAll, jobs.OverlapAllow), base), now)
	if got := len(sm.Runs(fsm.RunFilter{})); got != 10 {
		t.Errorf("granted %d runs, want the 10 inside the catch-up window", got)
	}
	skips := sm.Skips("j")
	if len(skips) != 1 || skips[0].Count != 50 || !strings.Contains(skips[0].Reason, "catchup_window") {
		t.Errorf("skips = %+v, want one range of 50 older than the window", skips)
	}
	if last, _ := sm.LastScheduled("j"); !last.Equal(base.Add(60 * time.Second)) {
		t.Errorf("last scheduled = %s, want 09:01:00", last)
	}
}

func TestLeader_OverlapPolicies(t *testing.T) {
	t.Run("forbid skips with a reason", func(t *testing.T) {
		l, sm := newTestLeader(t, spec("j", jobs.MisfireLatest, jobs.OverlapForbid))
		l.fire(spec("j", jobs.MisfireLatest, jobs.OverlapForbid), base.Add(time.Second), "schedule", false)
		run, _ := l.fire(spec("j", jobs.MisfireLatest, jobs.OverlapForbid), base.Add(2*time.Second), "schedule", false)
		if run.State != jobs.Skipped || !strings.Contains(run.Reason, "overlap: forbid") {
			t.Errorf("second run = %s (%s), want skipped because the first is open", run.State, run.Reason)
		}
		if got := len(sm.OpenRuns("j")); got != 1 {
			t.Errorf("%d open runs, want 1", got)
		}
	})
	t.Run("allow runs both", func(t *testing.T) {
		l, sm := newTestLeader(t, spec("j", jobs.MisfireLatest, jobs.OverlapAllow))
		l.fire(spec("j", jobs.MisfireLatest, jobs.OverlapAllow), base.Add(time.Second), "schedule", false)
		l.fire(spec("j", jobs.MisfireLatest, jobs.OverlapAllow), base.Add(2*time.Second), "schedule", false)
		if got := len(sm.OpenRuns("j")); got != 2 {
			t.Errorf("%d open runs, want 2", got)
		}
	})
	t.Run("replace cancels the open run", func(t *testing.T) {
		l, sm := newTestLeader(t, spec("j", jobs.MisfireLatest, jobs.OverlapReplace))
		first, _ := l.fire(spec("j", jobs.MisfireLatest, jobs.OverlapReplace), base.Add(time.Second), "schedule", false)
		l.fire(spec("j", jobs.MisfireLatest, jobs.OverlapReplace), base.Add(2*time.Second), "schedule", false)
		old, _ := sm.Run(first.ID)
		if old.State != jobs.Cancelled || !strings.Contains(old.Attempts[0].Error, "overlap: replace") {
			t.Errorf("replaced run = %s (%+v), want cancelled", old.State, old.Attempts[0])
		}
		if got := len(sm.OpenRuns("j")); got != 1 {
			t.Errorf("%d open runs, want 1", got)
		}
	})
}

func TestLeader_ExpiryTakesOverWithAGreaterToken(t *testing.T) {
	s := spec("j", jobs.MisfireLatest, jobs.OverlapAllow)
	s.Retries = 1
	s.LeaseTTL = jobs.Duration(time.Second)
	l, sm := newTestLeader(t, s)
	run, err := l.fire(s, base.Add(time.Second), "schedule", false)
	if err != nil {
		t.Fatal(err)
	}
	// No renewal ever came: move the lease's deadline into the past.
	l.mu.Lock()
	for _, le := range l.leases {
		le.deadline = base.Add(-time.Millisecond)
	}
	l.mu.Unlock()
	l.checkLeases()
	got, _ := sm.Run(run.ID)
	if len(got.Attempts) != 2 || got.Attempts[0].State != jobs.Lost || !got.Attempts[0].Expired {
		t.Fatalf("after expiry: %+v", got.Attempts)
	}
	if !(got.Attempts[0].Token.Seq < got.Attempts[1].Token.Seq) || got.Attempts[1].State != jobs.Pending {
		t.Errorf("takeover attempt %+v after %+v", got.Attempts[1], got.Attempts[0])
	}
	// A renewal for the expired attempt is a definite no; for the new one,
	// yes.
	if r, _ := renewOne(l, worker.Renewal{Attempt: got.Attempts[0].ID}, "n1"); r.Held {
		t.Error("the expired attempt's lease was renewed")
	}
	if r, _ := renewOne(l, worker.Renewal{Attempt: got.Attempts[1].ID}, "n1"); !r.Held {
		t.Errorf("the takeover attempt's lease was not renewed: %s", r.Reason)
	}
	if r, _ := renewOne(l, worker.Renewal{Attempt: got.Attempts[1].ID}, "n2"); r.Held {
		t.Error("another node renewed the takeover attempt's lease")
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The runs due at one instant are granted in one entry, each attempt with
// its token; a job's second due time (misfire: all) follows in an entry
// of its own, after its first. Every attempt is dispatched.
func TestLeader_FireDueBatchesGrants(t *testing.T) {
	a, b, c := spec("a", jobs.MisfireLatest, jobs.OverlapAllow), spec("b", jobs.MisfireLatest, jobs.OverlapAllow), spec("c", jobs.MisfireAll, jobs.OverlapAllow)
	l, sm := newTestLeader(t, a, b, c)
	now := base.Add(2*time.Second + 100*time.Millisecond)
	l.s.Clock = fixedClock{now}
	q := fireQueue{due(t, a, base), due(t, b, base), due(t, c, base)}
	heap.Init(&q)
	l.fireDue(&q)

	tokenOf := func(job string, at time.Time) jobs.Fence {
		t.Helper()
		r, ok := sm.Run(jobs.RunID(job, at))
		if !ok || len(r.Attempts) != 1 {
			t.Fatalf("%s at %s: run %+v, %v; want one attempt", job, at.Format(time.TimeOnly), r, ok)
		}
		return r.Attempts[0].Token
	}
	first := tokenOf("c", base.Add(time.Second))
	for _, job := range []string{"a", "b"} {
		if got := tokenOf(job, base.Add(2*time.Second)); got != first {
			t.Errorf("%s: token %s, want the batch's %s", job, got, first)
		}
	}
	if got := tokenOf("c", base.Add(2*time.Second)); got.Seq <= first.Seq {
		t.Errorf("c's second time: token %s, want one after the batch's %s", got, first)
	}
	l.wg.Wait() // the dispatches
	d := l.s.Dispatcher.(*recordingDispatcher)
	d.mu.Lock()
	defer d.mu.Unlock()
	if got := len(d.sent); got != 4 {
		t.Errorf("dispatched %d attempts, want 4", got)
	}
	if q.Len() != 3 {
		t.Errorf("queue holds %d jobs, want 3", q.Len())
	}
}

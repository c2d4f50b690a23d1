package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// recordingForwarder stands for the transport's client: it records what a
// follower sends the leader.
type recordingForwarder struct {
	Forwarder
	calls []string
}

func (r *recordingForwarder) SetJobs(_ context.Context, specs []jobs.Spec, source string, scope []string) (string, error) {
	r.calls = append(r.calls, "set_jobs "+source)
	return "h", nil
}

func (r *recordingForwarder) SetJobsChanges(_ context.Context, ch JobChanges, source string) (string, int, error) {
	r.calls = append(r.calls, "set_jobs_changes "+source)
	return "h", 1, nil
}

func (r *recordingForwarder) TriggerAt(_ context.Context, job string, force bool, _ time.Time) (jobs.Run, error) {
	if force {
		job += " force"
	}
	r.calls = append(r.calls, "trigger "+job)
	return jobs.Run{}, nil
}

func (r *recordingForwarder) Note(_ context.Context, attempt, kind, node, detail string) error {
	r.calls = append(r.calls, "note "+kind)
	return nil
}

func (r *recordingForwarder) CompleteMany(_ context.Context, cs []replicated.Completion) ([]error, error) {
	r.calls = append(r.calls, fmt.Sprintf("complete_many %d", len(cs)))
	return make([]error, len(cs)), nil
}

func (r *recordingForwarder) RenewMany(_ context.Context, node string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	r.calls = append(r.calls, fmt.Sprintf("renew_many %d for %s", len(rs), node))
	return make([]worker.RenewReply, len(rs)), nil
}

func (r *recordingForwarder) Release(_ context.Context, attempt, reason, asker string) (Released, error) {
	r.calls = append(r.calls, "release "+attempt)
	return Released{}, nil
}

func (r *recordingForwarder) Backfill(_ context.Context, req fsm.BackfillRequest) (fsm.BackfillResult, error) {
	r.calls = append(r.calls, "backfill "+req.Job)
	return fsm.BackfillResult{}, nil
}

// The leader re-validates whatever it is sent, whoever sent it, and an
// invalid request changes nothing; a node that does not lead answers
// ErrNotLeader from Local and forwards its own calls.
func TestScheduler_LocalRevalidates(t *testing.T) {
	sm := fsm.NewFSM()
	s := New(&fakeRaft{fsm: sm}, sm)
	s.Clock = fixedClock{base}
	s.MaxBodyBytes = 32 << 20
	ctx := t.Context()
	good := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true", Output: "reports/{{ .Scheduled.Format \"2006\" }}.csv"}
	hash, err := s.Local().SetJobs(ctx, []jobs.Spec{good}, "test", nil)
	if err != nil {
		t.Fatal(err)
	}

	bad := []struct {
		name string
		spec func(*jobs.Spec)
		says string
	}{
		{"output escapes the store", func(s *jobs.Spec) { s.Output = "../../etc/x" }, "not a valid store key"},
		{"output absolute", func(s *jobs.Spec) { s.Output = "/etc/x" }, "not a valid store key"},
		{"output larger than the store takes", func(s *jobs.Spec) { s.MaxOutputBytes = 64 << 20 }, "store.max_body_bytes"},
		{"a bad schedule", func(s *jobs.Spec) { s.Schedules = []string{"every day"} }, "schedules"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			spec := good
			tc.spec(&spec)
			_, err := s.Local().SetJobs(ctx, []jobs.Spec{spec}, "api", nil)
			if !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("SetJobs: %v, want ErrInvalidConfig saying %q", err, tc.says)
			}
			if got := sm.JobSetInfo(); got.Hash != hash || got.Source != "test" {
				t.Errorf("job set after a refused one: %+v, want unchanged", got)
			}
		})
	}

	run := applyAt(t, sm, 3, 100, grant("report", base)).Run
	id := run.Attempts[0].ID
	for name, err := range map[string]error{
		"note of an unknown kind":      s.Local().Note(ctx, id, "grants", "n2", ""),
		"note with a malformed detail": s.Local().Note(ctx, id, jobs.NoteStoreRefused, "n2", "refused"),
		"note of a bad attempt id":     s.Local().Note(ctx, "nope", jobs.EventSuspect, "n2", ""),
		"audit of an unknown kind":     s.Local().Audit(ctx, "future_kind", "n2", ""),
		"audit posing as the FSM":      s.Local().Audit(ctx, jobs.EventGranted, "n2", ""),
		"completion in an open state":  s.Local().Complete(ctx, replicated.Completion{Attempt: id, State: jobs.Running}),
		"completion in no state":       s.Local().Complete(ctx, replicated.Completion{Attempt: id, State: "bogus"}),
		"completion too long":          s.Local().Complete(ctx, replicated.Completion{Attempt: id, State: jobs.Failed, Error: strings.Repeat("x", maxErrorLen+1)}),
	} {
		if !errors.Is(err, jobs.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if c := sm.Counters(); c["grants"] != 1 || c[fsm.CounterElections] != 1 || len(c) != 2 {
		t.Errorf("counters after refused calls: %v, want only the grant and its term's election", c)
	}
	if r, _ := sm.Run(run.ID); r.State != jobs.Pending {
		t.Errorf("run after refused completions: %s, want pending", r.State)
	}
	if err := s.Local().Note(ctx, id, jobs.NoteStoreRefused, "n2", "stale_owner reports/2026.csv greatest=9.9"); err != nil {
		t.Errorf("a well-formed store_refused note: %v", err)
	}
	if err := s.Local().Audit(ctx, jobs.EventLoginFailed, "n2", "locked out"); err != nil {
		t.Errorf("a known audit kind: %v", err)
	}

	t.Run("a follower", func(t *testing.T) {
		sm := fsm.NewFSM()
		fwd := &recordingForwarder{}
		s := New(&fakeRaft{fsm: sm, follower: true}, sm)
		s.Forwarder = fwd
		if _, err := s.Local().SetJobs(ctx, []jobs.Spec{good}, "x", nil); !errors.Is(err, jobs.ErrNotLeader) {
			t.Errorf("Local().SetJobs on a follower: %v, want ErrNotLeader", err)
		}
		if _, err := s.Local().TriggerAt(ctx, "report", false, base); !errors.Is(err, jobs.ErrNotLeader) {
			t.Errorf("Local().Trigger on a follower: %v, want ErrNotLeader", err)
		}
		s.SetJobs(ctx, []jobs.Spec{good}, "api", nil)
		s.Trigger(ctx, "report", true)
		s.Note(ctx, "report@x.1", jobs.EventLost, "w1", "")
		s.CompleteMany(ctx, []replicated.Completion{{Attempt: "report@x.1"}, {Attempt: "report@x.2"}})
		s.RenewMany(ctx, "w1", []worker.Renewal{{Attempt: "report@x.2"}})
		s.Release(ctx, "report@x.2", "stuck", "api")
		s.Backfill(ctx, fsm.BackfillRequest{Job: "report"})
		const want = "set_jobs api, trigger report force, note lost, complete_many 2, renew_many 1 for w1, release report@x.2, backfill report"
		if got := strings.Join(fwd.calls, ", "); got != want {
			t.Errorf("forwarded %s", got)
		}
		if sm.LastIndex() != 0 {
			t.Error("a follower applied something itself")
		}
	})
}

// The leader reacts to the FSM's typed changes: an attempt that ended
// failed with retries left gets its retry timer and loses its lease; a
// resync after a restore finds every run waiting for a retry.
func TestLeader_ReactsToChanges(t *testing.T) {
	js := spec("j", jobs.MisfireLatest, jobs.OverlapAllow)
	js.Retries, js.Backoff = 2, jobs.Duration(3*time.Second)
	l, sm := newTestLeader(t, js)
	feed := sm.Changes()
	defer feed.Close()
	run, err := l.fire(js, base.Add(time.Second), "schedule", false)
	if err != nil {
		t.Fatal(err)
	}
	a := run.Attempts[0]
	if !l.leased(a.ID) {
		t.Fatal("no lease for the granted attempt")
	}
	if err := l.s.Complete(t.Context(), replicated.Completion{Attempt: a.ID, State: jobs.Failed, EndedAt: base}); err != nil {
		t.Fatal(err)
	}
	if jobsChanged, resynced := l.onChanges(feed.Take()); jobsChanged || resynced {
		t.Errorf("a completion said the job set changed (%v) or changes were dropped (%v)", jobsChanged, resynced)
	}
	l.mu.Lock()
	due, ok := l.retryAt[run.ID]
	l.mu.Unlock()
	if !ok || !due.After(base) {
		t.Errorf("retry timer of %s: %v (%v), want set after the backoff", run.ID, due, ok)
	}
	if l.leased(a.ID) {
		t.Error("the ended attempt kept its lease")
	}

	// A resync finds it too.
	l.mu.Lock()
	delete(l.retryAt, run.ID)
	l.mu.Unlock()
	if _, resynced := l.onChanges([]fsm.Change{{Kind: fsm.ChangeResync}}); !resynced {
		t.Error("a resync did not rebuild the queue")
	}
	l.mu.Lock()
	_, ok = l.retryAt[run.ID]
	l.mu.Unlock()
	if !ok {
		t.Error("resync did not set the retry timer")
	}
}

// A follower forwards an audit entry to the leader like a note: the
// leader's Local takes it.
func TestScheduler_AuditForwarded(t *testing.T) {
	sm := fsm.NewFSM()
	s := New(&fakeRaft{fsm: sm}, sm)
	s.Clock = fixedClock{base}
	if err := s.Local().Audit(t.Context(), jobs.EventLoginFailed, "n3", "locked out"); err != nil {
		t.Fatalf("Local().Audit = %v, want applied", err)
	}
	if err := s.Audit(t.Context(), jobs.EventLoginFailed, "n1", "from the leader itself"); err != nil {
		t.Fatal(err)
	}
	evs := sm.Events(0, 0)
	if len(evs) != 2 || evs[0].Node != "n3" || evs[1].Detail != "from the leader itself" {
		t.Errorf("events = %+v, want the forwarded entry and the leader's own", evs)
	}
}

// lossyForwarder stands for the transport's client when the leader's
// answers are lost: it makes each call twice on the leader, as
// rpc.Client retries a call whose answer did not come, and returns what
// the second one answered.
type lossyForwarder struct{ Forwarder }

func (f lossyForwarder) TriggerAt(ctx context.Context, job string, force bool, at time.Time) (jobs.Run, error) {
	f.Forwarder.TriggerAt(ctx, job, force, at)
	return f.Forwarder.TriggerAt(ctx, job, force, at)
}

func (f lossyForwarder) ACL(ctx context.Context, c acl.Cmd) error {
	f.Forwarder.ACL(ctx, c)
	return f.Forwarder.ACL(ctx, c)
}

// tickClock moves on a millisecond each time it is read, as the leader's
// clock does between a call and its retry.
type tickClock struct{ n atomic.Int64 }

func (c *tickClock) Now() time.Time {
	return base.Add(time.Duration(c.n.Add(1)) * time.Millisecond)
}
func (c *tickClock) NewTimer(d time.Duration) jobs.Timer { return jobs.SystemClock{}.NewTimer(d) }

// A trigger or an ACL change sent to the leader again, after its answer
// was lost, is the same request: one run, one change, one line of the
// audit trail, and the one who asked is told it was done, not that the
// token is already revoked.
func TestScheduler_ForwardSentTwice(t *testing.T) {
	l, sm := newTestLeader(t, spec("j", jobs.MisfireLatest, jobs.OverlapAllow))
	l.s.term.Store(l)
	l.s.Clock = &tickClock{}
	follower := New(&fakeRaft{fsm: sm, follower: true}, sm)
	follower.Clock = fixedClock{base.Add(-time.Second)}
	follower.Forwarder = lossyForwarder{l.s.Local()}
	ctx := t.Context()

	run, err := follower.Trigger(ctx, "j", false)
	if err != nil {
		t.Fatal(err)
	}
	runs := sm.Runs(fsm.RunFilter{Job: "j"})
	if len(runs) != 1 || run.ID != runs[0].ID || run.ID != jobs.RunID("j", base.Add(-time.Second)) {
		t.Fatalf("one trigger sent twice: answered %s, runs %v; want one run, at the time the follower took the request", run.ID, runIDs(runs))
	}

	root, _ := newACLToken("root")
	p := acl.Policy{Name: "a", Rules: []acl.Rule{{Namespace: "team-a", Capabilities: []acl.Capability{acl.CapRead}}}}
	pb := acl.Policy{Name: "b", Rules: []acl.Rule{{Namespace: "team-b", Capabilities: []acl.Capability{acl.CapRead}}}}
	tok, secret := newACLToken("ci-a", "a")
	for _, c := range []acl.Cmd{
		{Action: acl.ActBootstrap, Token: root},
		{Action: acl.ActPolicyUpsert, Policy: &p},
		{Action: acl.ActPolicyUpsert, Policy: &pb},
		{Action: acl.ActTokenCreate, Token: tok},
		{Action: acl.ActTokenRevoke, Accessor: tok.Accessor},
		{Action: acl.ActPolicyDelete, Name: "b"},
	} {
		if err := follower.ACL(ctx, c); err != nil {
			t.Errorf("%s sent twice: %v", c.Action, err)
		}
	}
	if _, err := sm.ACL().Resolve(secret, base); !errors.Is(err, acl.ErrRevokedToken) {
		t.Errorf("the token after its revoke: %v, want revoked", err)
	}
	var changes []string
	for _, e := range sm.Events(0, 0) {
		if e.Kind == jobs.EventACL {
			changes = append(changes, e.Detail)
		}
	}
	if len(changes) != 6 {
		t.Errorf("the audit trail has %d ACL changes, want 6:\n%s", len(changes), strings.Join(changes, "\n"))
	}
	if err := follower.ACL(ctx, acl.Cmd{Action: acl.ActPolicyDelete, Name: "b"}); !errors.Is(err, acl.ErrUnknownPolicy) {
		t.Errorf("a delete of a policy this node knows is gone: %v, want ErrUnknownPolicy", err)
	}
	// A second request to revoke the token is not the first one again.
	if err := follower.ACL(ctx, acl.Cmd{Action: acl.ActTokenRevoke, Accessor: tok.Accessor, At: base}); !errors.Is(err, acl.ErrAlreadyRevoked) {
		t.Errorf("another revoke of the token: %v, want ErrAlreadyRevoked", err)
	}
}

func newACLToken(name string, policies ...string) (*acl.Token, string) {
	secret, acc := acl.NewSecret()
	return &acl.Token{Accessor: acc, Name: name, Policies: policies, Hash: acl.HashSecret(secret), CreatedAt: base}, secret
}

func runIDs(runs []jobs.Run) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return ids
}

// The time a trigger was asked at names its run when it is the leader's
// to take: not a scheduled run's millisecond, not after the leader's
// clock by more than maxTriggerAhead (within it, the leader waits), not
// further back than requestWindow.
func TestScheduler_TriggerTimes(t *testing.T) {
	for name, tc := range map[string]struct{ at, want time.Time }{
		"unset":                 {time.Time{}, base},
		"a minute and more ago": {base.Add(-requestWindow - time.Millisecond), base},
		"a minute ahead":        {base.Add(requestWindow + time.Millisecond), base},
		"in another zone":       {base.Add(-time.Second).In(time.FixedZone("X", 3600)), base.Add(-time.Second)},
	} {
		if got := requestTime(tc.at, base); !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("requestTime(%s): %v, want %v in UTC", name, got, tc.want)
		}
	}

	l, sm := newTestLeader(t, spec("j", jobs.MisfireLatest, jobs.OverlapAllow))
	l.s.term.Store(l)
	clock := &tickClock{}
	l.s.Clock = clock
	ctx := t.Context()
	// A scheduled run of that millisecond is not this trigger's.
	sched := base.Add(2 * time.Second)
	if _, err := l.s.applyLocalCmd(ctx, grant("j", sched)); err != nil {
		t.Fatal(err)
	}
	run, err := l.s.Local().TriggerAt(ctx, "j", false, sched)
	if err != nil || run.Trigger != "manual" || run.ScheduledAt.Equal(sched) {
		t.Errorf("a trigger at a scheduled run's time: %s (%s), %v; want a manual run of its own", run.ID, run.Trigger, err)
	}
	// Ahead by less than maxTriggerAhead: scheduled at it, once the
	// leader's clock reaches it; further ahead, at the leader's clock.
	near := clock.Now().Add(50 * time.Millisecond)
	if run, err := l.s.Local().TriggerAt(ctx, "j", false, near); err != nil || !run.ScheduledAt.Equal(near.Truncate(time.Millisecond)) {
		t.Errorf("a trigger asked 50 ms ahead: %s, %v; want it scheduled at %s", run.ID, err, near)
	}
	far := clock.Now().Add(2 * maxTriggerAhead)
	if run, err := l.s.Local().TriggerAt(ctx, "j", false, far); err != nil || !run.ScheduledAt.Before(far.Add(-maxTriggerAhead)) {
		t.Errorf("a trigger asked %s ahead: %s, %v; want it scheduled at the leader's clock", 2*maxTriggerAhead, run.ID, err)
	}
	if n := len(sm.Runs(fsm.RunFilter{Job: "j"})); n != 4 {
		t.Errorf("%d runs of j, want the scheduled one and three triggered", n)
	}
}

// twiceRaft commits every entry twice, as two copies of one request in
// flight at once would be: the second is decided after the first.
type twiceRaft struct{ *fakeRaft }

func (r twiceRaft) Apply(ctx context.Context, cmd []byte) (any, error) {
	if _, err := r.fakeRaft.Apply(ctx, cmd); err != nil {
		return nil, err
	}
	return r.fakeRaft.Apply(ctx, cmd)
}

// A copy of an ACL change that passed the leader's check before the
// other copy was committed is refused in Apply as a repeat, which the
// leader answers as done.
func TestScheduler_ACLCopiesInFlight(t *testing.T) {
	sm := fsm.NewFSM()
	s := New(twiceRaft{&fakeRaft{fsm: sm}}, sm)
	s.Clock = fixedClock{base}
	root, _ := newACLToken("root")
	if err := s.ACL(t.Context(), acl.Cmd{Action: acl.ActBootstrap, Token: root}); err != nil {
		t.Fatalf("a bootstrap committed twice: %v", err)
	}
	if err := s.ACL(t.Context(), acl.Cmd{Action: acl.ActTokenRevoke, Accessor: root.Accessor}); err != nil {
		t.Fatalf("a revoke committed twice: %v", err)
	}
	if st := sm.ACL(); !st.Bootstrapped || st.Tokens[root.Accessor].RevokedAt.IsZero() {
		t.Errorf("the state after both: %+v", st)
	}
}

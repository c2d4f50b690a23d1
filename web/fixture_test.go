package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
	"github.com/fencecron/fencecron/scheduler/acl"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/fsm/feed"
	"github.com/fencecron/fencecron/scheduler/replicated"
	"github.com/fencecron/fencecron/scheduler/rpc"
	"github.com/fencecron/fencecron/scheduler/worker"
)

// The fixture is the report handoff (docs/how-it-works.md) in miniature: n1 leads
// epoch 3 and grants the July report to w1 (token 3.10); w1 stalls, n2
// is elected in epoch 4, w1's lease expires and w2 gets attempt 2 (token
// 4.15), which publishes; then w1 wakes up, its publish is refused as
// stale_owner, and it reports fenced.
var t0 = time.Date(2026, 8, 1, 9, 0, 0, 0, time.UTC)

const (
	reportKey = "reports/2026-07.csv"
	reportRun = "report@20260801T090000Z"
)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func intp(i int) *int { return &i }

type fakeClock struct{ now time.Time }

func (c fakeClock) Now() time.Time                      { return c.now }
func (c fakeClock) NewTimer(d time.Duration) jobs.Timer { return jobs.SystemClock{}.NewTimer(d) }

// stepClock is a clock a test moves forward while the server runs.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *stepClock) NewTimer(d time.Duration) jobs.Timer { return jobs.SystemClock{}.NewTimer(d) }
func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type fakeCluster struct {
	stats election.RaftStats
}

func (fakeCluster) ID() string                  { return "n2" }
func (fakeCluster) State() string               { return "Leader" }
func (fakeCluster) Leader() (string, string)    { return "n2", "127.0.0.1:7957" }
func (fakeCluster) LeaderHTTP() (string, error) { return "127.0.0.1:8082", nil }
func (fakeCluster) Meta() election.Meta         { return election.Meta{Role: "server", ConfigHash: "abc"} }
func (fakeCluster) Members() []election.Member {
	return []election.Member{
		{Name: "n1", Addr: "127.0.0.1:7946", State: "dead", Since: at(20), Meta: election.Meta{Role: "server", HasState: true, HTTPAddr: "127.0.0.1:8081", ConfigHash: "abc"}},
		{Name: "n2", Addr: "127.0.0.1:7956", State: "alive", Since: at(-100), Meta: election.Meta{Role: "server", HasState: true, Leading: true, Term: 4, HTTPAddr: "127.0.0.1:8082", ConfigHash: "abc"}},
		{Name: "w1", Addr: "127.0.0.1:7966", State: "suspect", Since: at(25), Meta: election.Meta{Role: "worker", Tags: map[string]string{"zone": "a"}, HTTPAddr: "127.0.0.1:8083", ConfigHash: "old"}},
		{Name: "w2", Addr: "127.0.0.1:7976", State: "alive", Since: at(-100), Meta: election.Meta{Role: "worker", Tags: map[string]string{"zone": "b"}, HTTPAddr: "127.0.0.1:8084", ConfigHash: "abc"}},
	}
}
func (fakeCluster) Voters() ([]election.Voter, error) {
	return []election.Voter{{ID: "n1", Address: "127.0.0.1:7947", Voter: true}, {ID: "n2", Address: "127.0.0.1:7957", Voter: true}}, nil
}
func (c fakeCluster) RaftStats() (election.RaftStats, bool) { return c.stats, true }

// fakeState is a replicated state the test changes by hand.
type fakeState struct {
	mu       sync.Mutex
	specs    []jobs.Spec
	runs     []jobs.Run // newest first
	events   []jobs.Event
	counters map[string]uint64
	subs     feed.Signals
	// operatorPaused are the jobs ExportJobSet names as paused by an
	// operator; exporting, if set, is called by ExportJobSet.
	operatorPaused []string
	exporting      func()
	overload       jobs.Overload
}

func (f *fakeState) Epoch() (uint64, string) { return 4, "n2" }
func (f *fakeState) JobSet() ([]jobs.Spec, string, time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.specs), "test", at(-50), true
}
func (f *fakeState) ExportJobSet() fsm.JobSetExport {
	if f.exporting != nil {
		f.exporting()
	}
	specs, _, _, _ := f.JobSet()
	f.mu.Lock()
	paused := slices.Clone(f.operatorPaused)
	f.mu.Unlock()
	return fsm.JobSetExport{Info: f.JobSetInfo(), Jobs: jobs.Addrs(specs), OperatorPaused: paused}
}
func (f *fakeState) JobSetInfo() fsm.JobSetInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	info := fsm.JobSetInfo{Hash: "abc", Source: "test", AppliedAt: at(-50), Count: len(f.specs)}
	for _, s := range f.specs {
		if s.Paused {
			info.Paused++
		}
	}
	if len(f.specs) > 0 {
		info.First = f.specs[0].Name
	}
	return info
}

// FindJobs is the FSM's search, simply: name order, and the matching
// the FSM uses.
func (f *fakeState) FindJobs(q jobs.Query) jobs.Page {
	specs, _, _, _ := f.JobSet()
	slices.SortFunc(specs, func(a, b jobs.Spec) int { return strings.Compare(a.Name, b.Name) })
	page := jobs.Page{Total: len(specs)}
	text := q.SearchText()
	for _, sp := range specs {
		last, ok := f.LastRun(sp.Name)
		if !q.Matches(&sp, sp.Paused, func() (jobs.State, bool) { return last.State, ok }, text) {
			continue
		}
		page.Matched++
		if sp.Name <= q.After {
			continue
		}
		if q.Limit > 0 && len(page.Jobs) == q.Limit {
			page.More = true
			continue
		}
		e := jobs.Listed{Spec: sp}
		if ok {
			e.LastRun = &last
		}
		page.Jobs = append(page.Jobs, e)
	}
	return page
}

func (f *fakeState) Spec(name string) (jobs.Spec, bool) {
	specs, _, _, _ := f.JobSet()
	i := slices.IndexFunc(specs, func(s jobs.Spec) bool { return s.Name == name })
	if i < 0 {
		return jobs.Spec{}, false
	}
	return specs[i], true
}
func (f *fakeState) Runs(rf fsm.RunFilter) []jobs.Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []jobs.Run
	for _, r := range f.runs {
		if rf.Job == "" || r.Job == rf.Job {
			out = append(out, r.Clone())
		}
		if rf.Limit > 0 && len(out) == rf.Limit {
			break
		}
	}
	return out
}
func (f *fakeState) LastRun(job string) (jobs.Run, bool) {
	rs := f.Runs(fsm.RunFilter{Job: job, Limit: 1})
	if len(rs) == 0 {
		return jobs.Run{}, false
	}
	return rs[0], true
}
func (f *fakeState) Events(after uint64, limit int) []jobs.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []jobs.Event
	for _, e := range f.events {
		if e.Seq > after {
			out = append(out, e)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}
func (f *fakeState) Skips(job string) []jobs.SkipRange {
	if job != "heartbeat" {
		return nil
	}
	return []jobs.SkipRange{{Job: "heartbeat", From: at(-40), To: at(-10), Count: 2, Reason: "paused"}}
}
func (f *fakeState) Overload() jobs.Overload { return f.overload }

func (f *fakeState) Counters() map[string]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]uint64{}
	for k, v := range f.counters {
		out[k] = v
	}
	return out
}
func (f *fakeState) Subscribe() (<-chan struct{}, func()) { return f.subs.Subscribe() }

// addEvent appends an audit entry and signals subscribers, as an applied
// Raft entry would.
func (f *fakeState) addEvent(e jobs.Event) {
	f.mu.Lock()
	e.Seq = uint64(len(f.events) + 1)
	f.events = append(f.events, e)
	f.mu.Unlock()
	f.subs.Signal()
}

func (f *fakeState) subscribers() int { return f.subs.Len() }

func newFakeState() *fakeState {
	tok1, tok2 := &jobs.Fence{Epoch: 3, Seq: 10}, &jobs.Fence{Epoch: 4, Seq: 15}
	report := jobs.Spec{Name: "report", Schedules: []string{"0 0 9 1 * *"}, Timezone: "Europe/Berlin", Shell: "build-report", Output: `reports/{{ .Scheduled.Format "2006-01" }}.csv`}
	heartbeat := jobs.Spec{Name: "heartbeat", Schedules: []string{"@every 30s"}, Command: []string{"/bin/true"}, Paused: true}
	report.Normalize()
	heartbeat.Normalize()
	s := &fakeState{
		specs: []jobs.Spec{report, heartbeat},
		runs: []jobs.Run{
			{ID: "heartbeat@20260801T085930Z", Job: "heartbeat", ScheduledAt: at(-30), State: jobs.Failed, Trigger: "manual", Attempts: []jobs.Attempt{
				{ID: "heartbeat@20260801T085930Z.1", Number: 1, Token: jobs.Fence{Epoch: 3, Seq: 8}, Worker: "w2", State: jobs.Failed,
					GrantedAt: at(-30), StartedAt: at(-30), EndedAt: at(-29), ExitCode: intp(1), Error: "exit code 1", StderrTail: "disk <full>\n"},
			}},
			{ID: reportRun, Job: "report", ScheduledAt: t0, Output: reportKey, State: jobs.Succeeded, Trigger: "schedule", Attempts: []jobs.Attempt{
				{ID: reportRun + ".1", Number: 1, Token: *tok1, Worker: "w1", State: jobs.Fenced, GrantedAt: at(0), StartedAt: at(1), EndedAt: at(4),
					ExitCode: intp(0), StoreOutcome: "stale_owner", Error: "publish reports/2026-07.csv refused as stale_owner", Expired: true},
				{ID: reportRun + ".2", Number: 2, Token: *tok2, Worker: "w2", State: jobs.Succeeded, GrantedAt: at(31), StartedAt: at(32), EndedAt: at(34),
					ExitCode: intp(0), StoreOutcome: "applied", StoreVersion: 1},
			}},
		},
		counters: map[string]uint64{"grants": 3, "expiries": 1, "fenced": 1, "stale_refused": 1, "elections": 2, "completions": 3},
	}
	for _, e := range []jobs.Event{
		{Time: at(-60), Kind: jobs.EventElected, Node: "n1", Epoch: 3, Detail: "n1 leads in epoch 3"},
		{Time: at(-50), Kind: jobs.EventJobSet, Detail: "2 jobs from test"},
		{Time: at(-30), Kind: jobs.EventGranted, Node: "w2", Job: "heartbeat", Run: "heartbeat@20260801T085930Z", Attempt: "heartbeat@20260801T085930Z.1", Token: &jobs.Fence{Epoch: 3, Seq: 8}},
		{Time: at(-29), Kind: jobs.EventCompleted, Node: "w2", Job: "heartbeat", Detail: "failed: exit code 1"},
		{Time: at(0), Kind: jobs.EventGranted, Node: "w1", Job: "report", Run: reportRun, Attempt: reportRun + ".1", Token: tok1},
		{Time: at(1), Kind: jobs.EventStarted, Node: "w1", Job: "report", Run: reportRun, Attempt: reportRun + ".1", Token: tok1},
		{Time: at(20), Kind: jobs.EventElected, Node: "n2", Epoch: 4, Detail: "n2 leads in epoch 4"},
		{Time: at(31), Kind: jobs.EventExpired, Node: "w1", Job: "report", Run: reportRun, Attempt: reportRun + ".1", Token: tok1, Detail: "lease not renewed"},
		{Time: at(31), Kind: jobs.EventGranted, Node: "w2", Job: "report", Run: reportRun, Attempt: reportRun + ".2", Token: tok2},
		{Time: at(34), Kind: jobs.EventCompleted, Node: "w2", Job: "report", Run: reportRun, Attempt: reportRun + ".2", Token: tok2, Detail: "succeeded"},
		{Time: at(45), Kind: jobs.EventFenced, Node: "w1", Job: "report", Run: reportRun, Attempt: reportRun + ".1", Token: tok1, Detail: "fenced: publish refused"},
	} {
		s.addEvent(e)
	}
	return s
}

// fakeStore holds one key with the handoff's history.
type fakeStore struct{}

func (fakeStore) meta() fencedstore.Meta {
	return fencedstore.Meta{Key: reportKey, Version: 1, Greatest: fencedstore.Token{Epoch: 4, Seq: 15}, Token: fencedstore.Token{Epoch: 4, Seq: 15},
		Attempt: reportRun + ".2", Hash: fencedstore.Hash([]byte(reportBody)), Size: int64(len(reportBody)), Updated: at(34)}
}

const reportBody = "month,total\n2026-07,<42>\n"

func (fakeStore) Establish(context.Context, fencedstore.EstablishRequest) (fencedstore.Result, error) {
	return fencedstore.Result{}, fencedstore.ErrUnavailable
}
func (fakeStore) Publish(context.Context, fencedstore.PublishRequest) (fencedstore.Result, error) {
	return fencedstore.Result{}, fencedstore.ErrUnavailable
}
func (fakeStore) RaiseFloor(context.Context, string, fencedstore.Token) (fencedstore.Token, error) {
	return fencedstore.Token{}, fencedstore.ErrUnavailable
}
func (s fakeStore) Get(_ context.Context, key string) (fencedstore.Object, error) {
	if key != reportKey {
		return fencedstore.Object{}, fencedstore.ErrNotFound
	}
	return fencedstore.Object{Meta: s.meta(), Body: []byte(reportBody)}, nil
}
func (s fakeStore) List(_ context.Context, prefix string) ([]fencedstore.Meta, error) {
	if err := fencedstore.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(reportKey, prefix) {
		return nil, nil
	}
	return []fencedstore.Meta{s.meta()}, nil
}
func (fakeStore) History(_ context.Context, key string) ([]fencedstore.Decision, error) {
	if err := fencedstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if key != reportKey {
		return nil, fencedstore.ErrNotFound
	}
	t1, t2 := fencedstore.Token{Epoch: 3, Seq: 10}, fencedstore.Token{Epoch: 4, Seq: 15}
	return []fencedstore.Decision{
		{Outcome: fencedstore.Established, Token: t1, Attempt: reportRun + ".1", Time: at(1)},
		{Outcome: fencedstore.Established, Token: t2, Attempt: reportRun + ".2", Time: at(32), Greatest: t1},
		{Outcome: fencedstore.Applied, Token: t2, Attempt: reportRun + ".2", Time: at(34), Greatest: t2, Version: 1},
		{Outcome: fencedstore.StaleOwner, Token: t1, Attempt: reportRun + ".1", Time: at(45), Greatest: t2, Version: 1},
	}, nil
}

// fakeScheduler records the actions asked of it.
type fakeScheduler struct {
	mu        sync.Mutex
	calls     []string
	audits    []jobs.Event
	trigger   func(job string) (jobs.Run, error)
	acl       *acl.State
	lastSet   []jobs.Spec
	lastScope []string
}

func (f *fakeScheduler) Audit(_ context.Context, kind, node, detail string) error {
	f.mu.Lock()
	f.audits = append(f.audits, jobs.Event{Kind: kind, Node: node, Detail: detail})
	f.mu.Unlock()
	return nil
}

// Audits returns the audit entries proposed so far.
func (f *fakeScheduler) Audits() []jobs.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.audits)
}

func (f *fakeScheduler) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeScheduler) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeScheduler) SetJobs(_ context.Context, specs []jobs.Spec, source string, scope []string) (string, error) {
	f.record("setjobs " + source)
	f.mu.Lock()
	f.lastSet, f.lastScope = specs, scope
	f.mu.Unlock()
	return "newhash", nil
}
func (f *fakeScheduler) SetJobsKnown(ctx context.Context, specs []jobs.Spec, _ scheduler.KnownJobs, source string, scope []string) (string, error) {
	return f.SetJobs(ctx, specs, source, scope)
}
func (f *fakeScheduler) SetJobsChanges(context.Context, scheduler.JobChanges, string) (string, int, error) {
	return "", 0, scheduler.ErrChangesNeedSet
}
func (f *fakeScheduler) TriggerAt(ctx context.Context, job string, force bool, _ time.Time) (jobs.Run, error) {
	return f.Trigger(ctx, job, force)
}
func (f *fakeScheduler) Trigger(_ context.Context, job string, force bool) (jobs.Run, error) {
	if force {
		f.record("trigger " + job + " force")
	} else {
		f.record("trigger " + job)
	}
	if f.trigger != nil {
		return f.trigger(job)
	}
	if job != "report" && job != "heartbeat" {
		return jobs.Run{}, jobs.ErrUnknownJob
	}
	return jobs.Run{ID: job + "@manual", Job: job, State: jobs.Pending, Attempts: []jobs.Attempt{{Number: 1, Worker: "w2", Token: jobs.Fence{Epoch: 4, Seq: 20}}}}, nil
}
func (f *fakeScheduler) Pause(_ context.Context, job string, paused bool) error {
	if paused {
		f.record("pause " + job)
	} else {
		f.record("resume " + job)
	}
	if job != "report" && job != "heartbeat" {
		return jobs.ErrUnknownJob
	}
	return nil
}

// errNotImplemented answers the calls a fake does not take: a test that
// needs one overrides it (releasingScheduler, backfillSched).
var errNotImplemented = errors.New("not implemented by the fake")

func (f *fakeScheduler) Release(context.Context, string, string, string) (scheduler.Released, error) {
	return scheduler.Released{}, fmt.Errorf("release: %w", errNotImplemented)
}
func (f *fakeScheduler) Backfill(context.Context, fsm.BackfillRequest) (fsm.BackfillResult, error) {
	return fsm.BackfillResult{}, fmt.Errorf("backfill: %w", errNotImplemented)
}

// ACL applies c to the fake's ACL state as the FSM would (acl.Decide).
func (f *fakeScheduler) ACL(_ context.Context, c acl.Cmd) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "acl "+c.Action+" by "+c.By)
	if c.At.IsZero() {
		c.At = at(50) // as the leader does
	}
	next, err := acl.Decide(f.acl, c)
	if err != nil {
		return err
	}
	f.acl = next
	return nil
}

// aclState is the fake's ACL state.
func (f *fakeScheduler) aclState() *acl.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acl
}

// The calls only workers make: the fake is the leader's
// scheduler.Forwarder too, which the internal API (scheduler/rpc) calls.
func (f *fakeScheduler) Started(context.Context, string, time.Time) error      { return nil }
func (f *fakeScheduler) Complete(context.Context, replicated.Completion) error { return nil }
func (f *fakeScheduler) Note(context.Context, string, string, string, string) error {
	return nil
}
func (f *fakeScheduler) Renew(context.Context, string, string) (worker.RenewReply, error) {
	return worker.RenewReply{}, nil
}
func (f *fakeScheduler) CompleteMany(_ context.Context, cs []replicated.Completion) ([]error, error) {
	return make([]error, len(cs)), nil
}
func (f *fakeScheduler) RenewMany(_ context.Context, _ string, rs []worker.Renewal) ([]worker.RenewReply, error) {
	return make([]worker.RenewReply, len(rs)), nil
}

var _ scheduler.Forwarder = (*fakeScheduler)(nil)

// fixture is a server over the fakes.
type fixture struct {
	srv   *Server
	state *fakeState
	sched *fakeScheduler
	http  *httptest.Server
}

func newFixture(t testing.TB, opts ...func(*Server)) *fixture {
	t.Helper()
	f := &fixture{state: newFakeState(), sched: &fakeScheduler{}}
	f.srv = &Server{
		Cluster: fakeCluster{stats: election.RaftStats{Term: 4, LastLogIndex: 40, CommitIndex: 40, AppliedIndex: 39, Leader: true}},
		State:   f.state, Scheduler: f.sched, Store: fakeStore{}, Internal: &rpc.Server{Leader: f.sched},
		Clock: fakeClock{now: at(50)}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	f.srv.ACLState = f.sched.aclState
	for _, o := range opts {
		o(f.srv)
	}
	if f.srv.StoreAPI == nil {
		// What cmd/fencecron hands in, read-only: the store's endpoints
		// over the fixture's store.
		f.srv.StoreAPI = &httpstore.Handler{Store: f.srv.Store, Logger: f.srv.Logger}
	}
	if err := f.srv.init(); err != nil {
		t.Fatal(err)
	}
	f.http = httptest.NewServer(f.srv.Handler())
	t.Cleanup(f.http.Close)
	return f
}

const (
	testToken = "the-api-token-of-the-web-tests"
	formType  = "application/x-www-form-urlencoded"
)

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serve runs one request through the server's handler as if it came
// from remote (ip:port), with the given Host.
func serve(f *fixture, method, path, body, remote, host string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr, req.Host = remote, host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(rec, req)
	return rec
}

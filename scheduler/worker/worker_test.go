package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/executor"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// funcStore is a fencedstore.Store whose writes are function fields; it
// counts the calls.
type funcStore struct {
	fencedstore.Store
	establish func(fencedstore.EstablishRequest) (fencedstore.Result, error)
	publish   func(fencedstore.PublishRequest) (fencedstore.Result, error)

	mu         sync.Mutex
	establishs []fencedstore.EstablishRequest
	publishes  []fencedstore.PublishRequest
}

func (s *funcStore) Establish(_ context.Context, req fencedstore.EstablishRequest) (fencedstore.Result, error) {
	s.mu.Lock()
	s.establishs = append(s.establishs, req)
	s.mu.Unlock()
	return s.establish(req)
}

func (s *funcStore) Publish(_ context.Context, req fencedstore.PublishRequest) (fencedstore.Result, error) {
	s.mu.Lock()
	s.publishes = append(s.publishes, req)
	s.mu.Unlock()
	return s.publish(req)
}

// holdingLeader confirms every lease and start and hands completions to a
// channel. It is the base of the tests' leaders: each overrides what its
// test watches.
type holdingLeader struct{ done chan replicated.Completion }

func (holdingLeader) Started(context.Context, string, time.Time) error { return nil }
func (l holdingLeader) CompleteMany(_ context.Context, cs []replicated.Completion) ([]error, error) {
	for _, c := range cs {
		l.done <- c
	}
	return make([]error, len(cs)), nil
}
func (holdingLeader) RenewMany(_ context.Context, _ string, rs []Renewal) ([]RenewReply, error) {
	out := make([]RenewReply, len(rs))
	for i, r := range rs {
		out[i] = RenewReply{Held: true, TTL: jobs.Duration(5 * time.Second), Started: r.Start}
	}
	return out, nil
}
func (holdingLeader) Note(context.Context, string, string, string, string) error { return nil }

// completion waits up to 30s for the next completion a worker reports.
func (l holdingLeader) completion(t *testing.T) replicated.Completion {
	t.Helper()
	select {
	case c := <-l.done:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt did not finish in 30s")
		return replicated.Completion{}
	}
}

// runOne runs one attempt of a job that prints "report" on a worker with
// store s and returns what the worker reported.
func runOne(t *testing.T, s fencedstore.Store, granted time.Time) (Assignment, replicated.Completion) {
	t.Helper()
	l := holdingLeader{done: make(chan replicated.Completion, 1)}
	w := &Worker{ID: "w1", Store: s, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	spec := jobs.Spec{Name: "report", Command: []string{"echo", "report"}, Output: "reports/{{ .RunID }}.csv",
		Timeout: jobs.Duration(10 * time.Second), LeaseTTL: jobs.Duration(5 * time.Second), MaxOutputBytes: 1 << 20}
	run := jobs.Run{ID: "report@x", Job: "report", Output: "reports/x.csv"}
	a := Assignment{Run: run, Spec: spec, Attempt: jobs.Attempt{ID: "report@x.1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 3, Seq: 9}, GrantedAt: granted}}
	if err := w.Accept(a); err != nil {
		t.Fatal(err)
	}
	return a, l.completion(t)
}

func expiredAnswer(key string) (fencedstore.Result, error) {
	return fencedstore.Result{Outcome: fencedstore.Expired, Key: key, Version: 2, Greatest: fencedstore.Token{Epoch: 1, Seq: 1}},
		fmt.Errorf("%s: %w", key, fencedstore.ErrExpired)
}

// A publish refused as expired is final: not retried, the attempt ends
// fenced with store outcome expired and an error that says so. Both store
// calls carry the attempt's one expiry.
func TestWorker_PublishRefusedAsExpired(t *testing.T) {
	s := &funcStore{
		establish: func(req fencedstore.EstablishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Established, Key: req.Key, Greatest: req.Token}, nil
		},
		publish: func(req fencedstore.PublishRequest) (fencedstore.Result, error) { return expiredAnswer(req.Key) },
	}
	a, c := runOne(t, s, time.Now().Add(-time.Minute))
	if c.State != jobs.Fenced || c.StoreOutcome != string(fencedstore.Expired) || !strings.Contains(c.Error, "refused as expired") {
		t.Errorf("completion %+v: want fenced, store outcome expired, an error that says so", c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.publishes) != 1 {
		t.Errorf("%d publishes, want 1: an expired token is not retried", len(s.publishes))
	}
	if len(s.establishs) != 1 || !s.establishs[0].Expires.Equal(a.TokenExpires()) || len(s.publishes) == 0 || !s.publishes[0].Expires.Equal(a.TokenExpires()) {
		t.Errorf("establish %+v and publish %+v: want both to carry the attempt's expiry %v", s.establishs, s.publishes, a.TokenExpires())
	}
}

// The worker's own store calls name the attempt's job, so the job's
// floor holds them too: a publish a forced release revoked ends the
// attempt fenced with an error that says so.
func TestWorker_PublishRevokedByTheJobsFloor(t *testing.T) {
	floor := fencedstore.Token{Epoch: 3, Seq: 9}
	s := &funcStore{
		establish: func(req fencedstore.EstablishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Established, Key: req.Key, Greatest: req.Token}, nil
		},
		publish: func(req fencedstore.PublishRequest) (fencedstore.Result, error) {
			res := fencedstore.Result{Outcome: fencedstore.StaleOwner, Key: req.Key, Greatest: req.Token, Floor: floor}
			return res, fencedstore.ErrOf(res)
		},
	}
	_, c := runOne(t, s, time.Now())
	if c.State != jobs.Fenced || c.StoreOutcome != string(fencedstore.StaleOwner) || !strings.Contains(c.Error, "a forced release revoked this attempt's token 3.9") {
		t.Errorf("completion %+v: want fenced, stale_owner, an error naming the release", c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.establishs) != 1 || s.establishs[0].Job != "report" || len(s.publishes) != 1 || s.publishes[0].Job != "report" {
		t.Errorf("establish %+v and publish %+v: want both to name job report", s.establishs, s.publishes)
	}
}

// An establish refused as expired ends the attempt before anything runs:
// lost (its run may get a new attempt and token), store outcome expired.
func TestWorker_EstablishRefusedAsExpired(t *testing.T) {
	s := &funcStore{
		establish: func(req fencedstore.EstablishRequest) (fencedstore.Result, error) { return expiredAnswer(req.Key) },
		publish: func(req fencedstore.PublishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{}, fmt.Errorf("publish after an expired establish")
		},
	}
	_, c := runOne(t, s, time.Now().Add(-time.Hour))
	if c.State != jobs.Lost || c.StoreOutcome != string(fencedstore.Expired) || !strings.Contains(c.Error, "expired") || !c.StartedAt.IsZero() {
		t.Errorf("completion %+v: want lost before starting, store outcome expired", c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.establishs) != 1 || len(s.publishes) != 0 {
		t.Errorf("%d establishes and %d publishes, want 1 and 0", len(s.establishs), len(s.publishes))
	}
}

// startGate opens a FIFO when a start is observed, which lets a job that
// waits on it go on.
type startGate struct {
	NopObserver
	fifo string
}

func (g startGate) AttemptStarted(string, time.Time, time.Time) {
	go func() { // blocks until the job opens it to read
		if f, err := os.OpenFile(g.fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
	}()
}

// A worker with JobNice runs its jobs that many levels below its own
// priority.
func TestWorker_RunsJobsBelowItsPriority(t *testing.T) {
	own, err := executor.ThreadNice()
	if err != nil {
		t.Fatal(err)
	}
	l := holdingLeader{done: make(chan replicated.Completion, 1)}
	s := &funcStore{establish: func(req fencedstore.EstablishRequest) (fencedstore.Result, error) {
		return fencedstore.Result{Outcome: fencedstore.Established, Key: req.Key, Greatest: req.Token}, nil
	}}
	// The worker lowers the job just after its exec, so the shell reads
	// its nice value only once the worker has seen the start (after the
	// lowering): the observer opens a FIFO the job waits on.
	fifo := filepath.Join(t.TempDir(), "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	w := &Worker{ID: "w1", Store: s, Leader: l, Grace: time.Second, JobNice: 3, Logger: slog.New(slog.DiscardHandler), Observer: startGate{fifo: fifo}}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	read := fmt.Sprintf(`: < %s; read -r line < /proc/$$/stat; set -- $line; shift 18; echo "$1"`, fifo)
	spec := jobs.Spec{Name: "nice", Command: []string{"/bin/sh", "-c", read},
		Timeout: jobs.Duration(10 * time.Second), LeaseTTL: jobs.Duration(5 * time.Second), MaxOutputBytes: 1 << 20}
	a := Assignment{Run: jobs.Run{ID: "nice@x", Job: "nice"}, Spec: spec,
		Attempt: jobs.Attempt{ID: "nice@x.1", Number: 1, Worker: "w1", Token: jobs.Fence{Epoch: 3, Seq: 9}, GrantedAt: time.Now()}}
	if err := w.Accept(a); err != nil {
		t.Fatal(err)
	}
	c := l.completion(t)
	if c.State != jobs.Succeeded {
		t.Fatalf("completion %+v: want succeeded", c)
	}
	if got, want := strings.TrimSpace(c.StdoutTail), strconv.Itoa(min(own+3, 19)); got != want {
		t.Errorf("the job ran at nice %s, want %s (the worker's %d + 3)", got, want, own)
	}
}

package scheduler

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
	"github.com/fencecron/fencecron/scheduler/notify"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeNotifier is a term's notifier that delivers nothing: it hands the
// term's context to the test and says when Run returned.
type fakeNotifier struct {
	targets  []notify.Target
	started  chan context.Context
	returned chan struct{}
}

func (f *fakeNotifier) Run(ctx context.Context) {
	defer close(f.returned)
	f.started <- ctx
	<-ctx.Done()
}

func (f *fakeNotifier) Targets() []notify.Target { return f.targets }

// newOneNodeScheduler returns a scheduler over a fake one-node cluster
// that leads as soon as it is opened.
func newOneNodeScheduler() (*Scheduler, *fsm.FSM) {
	sm := fsm.NewFSM()
	s := New(&fakeRaft{fsm: sm}, sm)
	s.Clock = fixedClock{base}
	s.Dispatcher = &recordingDispatcher{}
	s.Logger = slogDiscard()
	return s, sm
}

// The leader starts notification delivery for its term, under the term's
// context, and shows its targets while it leads; when the term ends, so
// does delivery, before the leader loop is done.
func TestLeader_NotifiesForItsTerm(t *testing.T) {
	s, _ := newOneNodeScheduler()
	f := &fakeNotifier{targets: []notify.Target{{Target: "https://hooks.example.com", Kind: jobs.NotifyWebhook, Pending: 1}},
		started: make(chan context.Context, 1), returned: make(chan struct{})}
	var made int
	s.newNotifier = func() notifier { made++; return f }
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close(context.Background())
		}
	}()

	var termCtx context.Context
	select {
	case termCtx = <-f.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the leader did not start delivery for its term")
	}
	waitFor(t, "the leader shows its sender's targets", func() error {
		ts, ok := s.NotifyTargets()
		if !ok || len(ts) != 1 || ts[0].Target != "https://hooks.example.com" {
			return fmt.Errorf("NotifyTargets = %+v, %v", ts, ok)
		}
		return nil
	})
	if err := termCtx.Err(); err != nil {
		t.Fatalf("delivery's context ended while leading: %v", err)
	}

	// The term ends: delivery has stopped by the time Close returns.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	select {
	case <-f.returned:
	default:
		t.Fatal("delivery still runs after the term ended")
	}
	if termCtx.Err() == nil {
		t.Error("delivery's context not cancelled when the term ended")
	}
	if ts, ok := s.NotifyTargets(); ok {
		t.Errorf("NotifyTargets after the term = %+v, true; want not leading", ts)
	}
	if made != 1 {
		t.Errorf("%d notifiers made for one term, want 1", made)
	}
}

// The leader's own delivery (package notify) sends a pending notice and
// records it through the leader's log.
func TestLeader_DeliversNotificationsThroughItsLog(t *testing.T) {
	var mu sync.Mutex
	got := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got++
		mu.Unlock()
	}))
	defer srv.Close()
	s, sm := newOneNodeScheduler()
	s.Notify = notify.Config{DashboardURL: "http://127.0.0.1:8080"}
	ctx := t.Context()
	if _, err := s.applyLocalCmd(ctx, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: base}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetJobs(ctx, []jobs.Spec{{Name: "j", Schedules: []string{"@daily"}, Shell: "false",
		Notify: []jobs.Notify{{On: []string{"failed"}, Slack: srv.URL + "/services/T/B/X"}}}}, "test", nil); err != nil {
		t.Fatal(err)
	}
	res, err := s.applyLocalCmd(ctx, grant("j", t0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.applyLocalCmd(ctx, complete(res.Run.Attempts[0].ID, jobs.Failed, 7, nil)); err != nil {
		t.Fatal(err)
	}
	if n := len(sm.Notices()); n != 1 {
		t.Fatalf("%d notices pending, want 1", n)
	}

	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	waitFor(t, "the delivery recorded", func() error {
		if n := sm.Counters()[fsm.CounterNotified]; n != 1 {
			return fmt.Errorf("notified = %d, %d pending", n, len(sm.Notices()))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if got != 1 {
		t.Errorf("target got %d messages, want 1", got)
	}
}

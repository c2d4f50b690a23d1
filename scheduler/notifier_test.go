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
	if _, err := s.applyLocalCmd(ctx, fsm.Command{Op: fsm.OpElected, Elected: &fsm.ElectedCmd{Node: "n1", At: base}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetJobs(ctx, []jobs.Spec{{Name: "j", Schedules: []string{"@daily"}, Shell: "false",
		Notify: []jobs.Notify{{On: []string{"failed"}, Slack: srv.URL + "/services/T/B/X"}}}}, "test"); err != nil {
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

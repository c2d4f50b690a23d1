package notify

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/fsm"
)

// hangingTarget is a loopback HTTP target that holds every request
// open until released (or the client gives up), then answers 503.
type hangingTarget struct {
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	got     int // requests received
	open    int // requests not answered yet
}

func newHangingTarget() *hangingTarget { return &hangingTarget{release: make(chan struct{})} }

func (h *hangingTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	h.mu.Lock()
	h.got++
	h.open++
	h.mu.Unlock()
	defer func() { h.mu.Lock(); h.open--; h.mu.Unlock() }()
	select {
	case <-h.release:
		w.WriteHeader(http.StatusServiceUnavailable)
	case <-r.Context().Done():
	}
}

func (h *hangingTarget) counts() (got, open int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got, h.open
}

func (h *hangingTarget) unblock() { h.once.Do(func() { close(h.release) }) }

// failRuns records n failed runs of job in lg, one after another: each
// leaves one notice per notify entry.
func failRuns(t *testing.T, lg *testLog, job string, n int) {
	t.Helper()
	for range n {
		at := t0
		if last, ok := lg.fsm.LastRun(job); ok {
			at = last.ScheduledAt.Add(time.Hour)
		}
		res, err := lg.apply(grant(job, at))
		if err != nil {
			t.Fatalf("grant %s at %s: %v", job, at, err)
		}
		if _, err := lg.apply(complete(res.Run.Attempts[0].ID, jobs.Failed, 1)); err != nil {
			t.Fatal(err)
		}
	}
}

// pendingOf counts the notices of job still pending.
func pendingOf(sm *fsm.FSM, job string) int {
	n := 0
	for _, no := range sm.Notices() {
		if no.Job == job {
			n++
		}
	}
	return n
}

// targetNamed returns what the sender shows of the target named name.
func targetNamed(n *Sender, name string) (Target, error) {
	ts := n.Targets()
	for _, tg := range ts {
		if tg.Target == name {
			return tg, nil
		}
	}
	return Target{}, fmt.Errorf("no target %s in %+v", name, ts)
}

// A webhook that hangs holds its own notices only: another target's
// notices, decided after more of the hung one's than there are senders,
// are delivered while the hung target's tries are still open; when those
// fail the hung target is shown backing off, by scheme and host only,
// and the other target still gets its notices.
func TestSender_HungTargetDoesNotDelayOthers(t *testing.T) {
	hung := newHangingTarget()
	srvA := httptest.NewServer(hung)
	defer srvA.Close()
	defer hung.unblock() // before srvA.Close, which waits for its handlers
	b := &target{status: http.StatusOK}
	srvB := httptest.NewServer(b)
	defer srvB.Close()
	lg := newTestLog(t,
		jobs.Spec{Name: "a", Schedules: []string{"@daily"}, Shell: "false", Notify: []jobs.Notify{{On: []string{"failed"}, Webhook: srvA.URL + "/hook/SECRET-A"}}},
		jobs.Spec{Name: "b", Schedules: []string{"@daily"}, Shell: "false", Notify: []jobs.Notify{{On: []string{"failed"}, Slack: srvB.URL + "/services/T/B/X"}}})
	sm := lg.fsm
	// More of a's notices than there are senders, then b's.
	failRuns(t, lg, "a", 2*maxSenders)
	failRuns(t, lg, "b", 2)
	// A try lasts until the test ends, and a failed target waits a minute.
	n := runSender(t, lg, Config{Timeout: time.Minute, Backoff: time.Minute, MaxBackoff: time.Minute})

	// The sender marks a try in flight before its request reaches the
	// server: wait until the target holds all the tries it may have open
	// (its 16 notices are more than that), so that what the sender shows
	// and what the server holds are compared at rest.
	waitFor(t, "a's target holds its tries open", func() error {
		if got, open := hung.counts(); got != maxPerTarget || open != maxPerTarget {
			return fmt.Errorf("%d tries, %d open; want %d held open", got, open, maxPerTarget)
		}
		return nil
	})
	waitFor(t, "b's notices delivered", func() error {
		if n := pendingOf(sm, "b"); n != 0 {
			return fmt.Errorf("%d of b's notices pending", n)
		}
		return nil
	})
	if n := len(b.got()); n != 2 {
		t.Errorf("b's target got %d messages, want 2", n)
	}
	// b went through while a's tries were still held open (a answers
	// nothing before it is released).
	got, open := hung.counts()
	if open != got || got > maxPerTarget {
		t.Errorf("a's target: %d tries, %d still open; want all open and at most %d", got, open, maxPerTarget)
	}
	if tg, err := targetNamed(n, srvA.URL); err != nil {
		t.Fatal(err)
	} else if tg.BackingOff || tg.InFlight != got || tg.Pending != 2*maxSenders || tg.Kind != jobs.NotifyWebhook {
		t.Errorf("a's target while hung = %+v", tg)
	}

	// a's tries fail: it backs off, and holds no sender meanwhile.
	hung.unblock()
	var shown Target
	waitFor(t, "a's target shown backing off", func() error {
		tg, err := targetNamed(n, srvA.URL)
		if err != nil {
			return err
		}
		if !tg.BackingOff || tg.InFlight != 0 {
			return fmt.Errorf("a's target = %+v", tg)
		}
		shown = tg
		return nil
	})
	// Its tries failed together: one failure in a row, not one per try.
	if shown.Failures != 1 || !shown.RetryAt.After(time.Now()) || shown.Pending != 2*maxSenders {
		t.Errorf("a's target = %+v; want 1 failure, a retry ahead, every notice still pending", shown)
	}
	if !strings.Contains(shown.LastError, "503") || strings.Contains(shown.LastError, "SECRET") {
		t.Errorf("a's last error %q: want the 503, and not the path", shown.LastError)
	}
	if tg, err := targetNamed(n, srvB.URL); err == nil && tg.BackingOff {
		t.Errorf("b's target backing off: %+v", tg)
	}

	// b is still served while a backs off.
	failRuns(t, lg, "b", 1)
	waitFor(t, "b's next notice delivered", func() error {
		if n := pendingOf(sm, "b"); n != 0 {
			return fmt.Errorf("%d of b's notices pending", n)
		}
		return nil
	})
	if got, _ := hung.counts(); got > maxPerTarget {
		t.Errorf("a's target tried %d times while backing off a minute", got)
	}
}

// A target that keeps failing is given up with everything waiting for
// it once it failed MaxTries tries in a row: its backlog does not wait
// for MaxTries tries of each notice.
func TestSender_TargetThatKeepsFailingGivesUpItsBacklog(t *testing.T) {
	h := &target{status: http.StatusServiceUnavailable}
	srv := httptest.NewServer(h)
	defer srv.Close()
	lg := newTestLog(t, jobs.Spec{Name: "j", Schedules: []string{"@daily"}, Shell: "false",
		Notify: []jobs.Notify{{On: []string{"failed"}, Webhook: srv.URL + "/hook"}}})
	sm := lg.fsm
	const backlog = 6
	failRuns(t, lg, "j", backlog)
	runSender(t, lg, Config{MaxTries: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	waitFor(t, "every notice given up", func() error {
		if n := sm.Counters()[fsm.CounterNotifyFailed]; n != backlog {
			return fmt.Errorf("notify_failed = %d", n)
		}
		return nil
	})
	if n := len(sm.Notices()); n != 0 {
		t.Errorf("%d notices still pending", n)
	}
	// Two tries at first (they fail together: one failure), then one at
	// a time: the third failure in a row ends it.
	if got, want := len(h.got()), 3+1; got != want {
		t.Errorf("target tried %d times, want %d (not 3 tries of each of the %d notices)", got, want, backlog)
	}
	var why int
	for _, e := range sm.Events(0, 0) {
		if e.Kind == jobs.EventNotifyFailed && strings.Contains(e.Detail, srv.URL+" did not answer 3 tries in a row") {
			why++
		}
	}
	if why < backlog-1 {
		t.Errorf("%d events say the target did not answer 3 tries in a row, want at least %d", why, backlog-1)
	}
}

// A target that answers, refusing some notices (a 4xx), is not backed
// off: each refused notice is tried MaxTries times on its own, and the
// target's other notices are delivered.
func TestSender_RefusedNoticeDoesNotBackOffItsTarget(t *testing.T) {
	var mu sync.Mutex
	refused := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"job":"bad"`) {
			mu.Lock()
			refused++
			mu.Unlock()
			http.Error(w, "no such channel", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	notify := []jobs.Notify{{On: []string{"failed"}, Webhook: srv.URL + "/hook"}}
	lg := newTestLog(t,
		jobs.Spec{Name: "bad", Schedules: []string{"@daily"}, Shell: "false", Notify: notify},
		jobs.Spec{Name: "good", Schedules: []string{"@daily"}, Shell: "false", Notify: notify})
	sm := lg.fsm
	failRuns(t, lg, "bad", 3)
	failRuns(t, lg, "good", 3)
	runSender(t, lg, Config{MaxTries: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	waitFor(t, "every notice settled", func() error {
		if n := len(sm.Notices()); n != 0 {
			return fmt.Errorf("%d pending", n)
		}
		return nil
	})
	c := sm.Counters()
	if c[fsm.CounterNotified] != 3 || c[fsm.CounterNotifyFailed] != 3 {
		t.Errorf("notified %d, failed %d; want 3 and 3", c[fsm.CounterNotified], c[fsm.CounterNotifyFailed])
	}
	mu.Lock()
	defer mu.Unlock()
	if refused != 3*3 {
		t.Errorf("refused %d tries, want 3 of each refused notice", refused)
	}
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestAskTimes_Lead(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		rtts  []time.Duration // observed at t0
		at    time.Duration   // lead asked at t0+at
		later []time.Duration // observed at t0+at, before
		want  time.Duration
	}{
		{"no asks yet", nil, 0, nil, startConfirmLead},
		{"fast asks keep the least lead", []time.Duration{ms, 2 * ms, 3 * ms}, 0, nil, startConfirmLead},
		{"one slow ask among a few is left out", append(slices.Repeat([]time.Duration{2 * ms}, 50), 42*ms), 0, nil, startConfirmLead},
		{"two count", append(slices.Repeat([]time.Duration{2 * ms}, 50), 42*ms, 42*ms), 0, nil, 50 * ms},
		{"the slowest 1% and one do not", append(slices.Repeat([]time.Duration{2 * ms}, 200), slices.Repeat([]time.Duration{42 * ms}, 3)...), 0, nil, startConfirmLead},
		{"the 99th percentile sets it", append(slices.Repeat([]time.Duration{2 * ms}, 95), slices.Repeat([]time.Duration{33 * ms}, 5)...), 0, nil, 40 * ms},
		{"capped", slices.Repeat([]time.Duration{400 * ms}, 10), 0, nil, maxStartLead},
		{"still counted in the next window", slices.Repeat([]time.Duration{42 * ms}, 10), askWindow + time.Second, nil, 50 * ms},
		{"counted with the next window's", slices.Repeat([]time.Duration{42 * ms}, 2), askWindow + time.Second, slices.Repeat([]time.Duration{2 * ms}, 50), 50 * ms},
		{"forgotten two windows on", slices.Repeat([]time.Duration{42 * ms}, 10), 2 * askWindow, nil, startConfirmLead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a askTimes
			a.lead(t0)
			for _, r := range tc.rtts {
				a.observe(t0, r)
			}
			for _, r := range tc.later {
				a.observe(t0.Add(tc.at), r)
			}
			if got := a.lead(t0.Add(tc.at)); got != tc.want {
				t.Errorf("lead = %s; want %s", got, tc.want)
			}
		})
	}
}

// slowStartLeader is a startLeader whose answers to start asks take
// delay, and which records, at each ask, when the asking attempt meant to
// ask (its lease client's startAsk).
type slowStartLeader struct {
	startLeader
	delay time.Duration
	w     *Worker

	askMu   sync.Mutex
	meantAt map[string]time.Time
	arrived map[string]time.Time
}

func (l *slowStartLeader) RenewMany(ctx context.Context, node string, rs []Renewal) ([]RenewReply, error) {
	for _, r := range rs {
		if !r.Start {
			continue
		}
		l.w.mu.Lock()
		lc := l.w.active[r.Attempt]
		l.w.mu.Unlock()
		l.askMu.Lock()
		if _, ok := l.meantAt[r.Attempt]; !ok && lc != nil {
			l.meantAt[r.Attempt], l.arrived[r.Attempt] = lc.startAsk, time.Now()
		}
		l.askMu.Unlock()
		time.Sleep(l.delay) // the leader is slow to answer starts
	}
	return l.startLeader.RenewMany(ctx, node, rs)
}

// A worker whose start asks were answered slowly asks the next run's start
// that much earlier, so that the answer is back by the fire time; not
// before it meant to.
func TestWorker_AsksEarlierAfterSlowAnswers(t *testing.T) {
	l := &slowStartLeader{
		startLeader: startLeader{holdingLeader: holdingLeader{done: make(chan replicated.Completion, 1)}},
		delay:       60 * time.Millisecond,
		meantAt:     map[string]time.Time{},
		arrived:     map[string]time.Time{},
	}
	w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	l.w = w
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	for i, id := range []string{"tick@1.1", "tick@2.1", "tick@3.1"} {
		granted := time.Now()
		fireAt := granted.Add(PreGrantLead)
		a := tickAhead(filepath.Join(t.TempDir(), "ran"), fireAt, granted, 30*time.Second)
		a.Run.ID, a.Attempt.ID = id[:len(id)-2], id
		if err := w.Accept(a); err != nil {
			t.Fatal(err)
		}
		if c := l.completion(t); c.State != jobs.Succeeded {
			t.Fatalf("attempt %d: completion %+v: want succeeded", i+1, c)
		}
		l.askMu.Lock()
		meant, arrived := l.meantAt[id], l.arrived[id]
		l.askMu.Unlock()
		lead := fireAt.Sub(meant)
		// The first two asks know of no answer, or of one alone (not
		// yet how long the asks take); the third knows that two took at
		// least 60 ms (bucket 60-65 ms, plus the margin).
		want := startConfirmLead
		if i == 2 {
			want = 70 * time.Millisecond
		}
		if lead < want || lead > maxStartLead || arrived.Before(meant) {
			t.Errorf("attempt %d: asked for its start %s ahead, meaning to at %s, arriving at %s; want at least %s ahead, at the fire time %s less that, and not before", i+1, lead, meant, arrived, want, fireAt)
		}
	}
}

// An ask that timed out is timed on to the answer of the next one (the
// leader may have confirmed the first and answer the next at once); one
// that failed otherwise is not slowness, and is left out.
func TestLeaseClient_TimeAsk(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		errs []error // each try's outcome, the tries 40 ms apart, then one answered 5 ms after its send (45 ms: the 45-50 ms bucket, 55 ms with the margin)
		want time.Duration
	}{
		{"answered at once", nil, startConfirmLead},
		{"after a timeout", []error{context.DeadlineExceeded}, 55 * ms},
		{"after a wrapped timeout", []error{fmt.Errorf("renew: %w", context.DeadlineExceeded)}, 55 * ms},
		{"after two timeouts", []error{context.DeadlineExceeded, context.DeadlineExceeded}, 95 * ms},
		{"after no leader", []error{errors.New("no leader")}, startConfirmLead},
		{"after a timeout, then no leader", []error{context.DeadlineExceeded, errors.New("no leader")}, startConfirmLead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Worker{}
			// Two attempts asking alike: one slow ask alone is left out.
			for range 2 {
				c := &leaseClient{w: w}
				sent := t0
				for _, err := range tc.errs {
					c.timeAsk(sent, sent.Add(40*ms), err)
					sent = sent.Add(40 * ms)
				}
				c.timeAsk(sent, sent.Add(5*ms), nil)
			}
			if got := w.asks.lead(t0.Add(time.Second)); got != tc.want {
				t.Errorf("lead = %s; want %s", got, tc.want)
			}
		})
	}
}

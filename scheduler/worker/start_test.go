package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// startLeader takes renewals in batches; it answers the renewals that ask
// for a start with an error (no leader) until refuse of them were
// answered, or for good if refuse < 0, then confirms them.
type startLeader struct {
	holdingLeader
	refuse int

	mu          sync.Mutex
	asked       []time.Time // when each start renewal arrived
	confirmedAt time.Time
	renewals    []seenRenewal // every renewal, start or not
}

type seenRenewal struct {
	at    time.Time
	start bool
}

func (l *startLeader) RenewMany(_ context.Context, _ string, rs []Renewal) ([]RenewReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]RenewReply, len(rs))
	for i, r := range rs {
		l.renewals = append(l.renewals, seenRenewal{time.Now(), r.Start})
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
			l := &startLeader{holdingLeader: holdingLeader{done: make(chan replicated.Completion, 1)}, refuse: tc.refuse}
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

// A run granted half a second ahead, on a short lease of a second, has
// its lease confirmed with its start: its first renewal is the one that
// asks for the start, sent no earlier than just before the fire time. The
// short lease its grant began holds until then.
func TestWorker_GrantedAheadConfirmedWithItsStart(t *testing.T) {
	l := &startLeader{holdingLeader: holdingLeader{done: make(chan replicated.Completion, 1)}}
	w := &Worker{ID: "w1", Store: &funcStore{}, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	marker := filepath.Join(t.TempDir(), "ran")
	granted := time.Now()
	fireAt := granted.Add(PreGrantLead)
	if err := w.Accept(tickAhead(marker, fireAt, granted, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if c := l.completion(t); c.State != jobs.Succeeded {
		t.Fatalf("completion %+v: want succeeded", c)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var seen []string
	for _, r := range l.renewals {
		seen = append(seen, fmt.Sprintf("%s start=%v", r.at.Sub(granted).Round(time.Millisecond), r.start))
	}
	if len(l.renewals) == 0 || !l.renewals[0].start || l.renewals[0].at.Before(fireAt.Add(-startConfirmLead)) {
		t.Errorf("renewals after the grant: %v; want the first to ask for the start, no earlier than %s before the fire time (%s after the grant)", seen, startConfirmLead, PreGrantLead)
	}
}

// A run granted ahead with an output asks for its start only once the
// store has taken its token: with the establish slower than the wait for
// the fire time, the ask follows the establish (and the start is late),
// so a confirmed start never stands for an attempt still establishing.
func TestWorker_StartAskedAfterTheEstablish(t *testing.T) {
	l := &startLeader{holdingLeader: holdingLeader{done: make(chan replicated.Completion, 1)}}
	var mu sync.Mutex
	var established time.Time
	store := &funcStore{
		establish: func(fencedstore.EstablishRequest) (fencedstore.Result, error) {
			time.Sleep(PreGrantLead + 200*time.Millisecond) // the store is slow: the fault under test
			mu.Lock()
			established = time.Now()
			mu.Unlock()
			return fencedstore.Result{Outcome: fencedstore.Established}, nil
		},
		publish: func(fencedstore.PublishRequest) (fencedstore.Result, error) {
			return fencedstore.Result{Outcome: fencedstore.Applied, Version: 1}, nil
		},
	}
	w := &Worker{ID: "w1", Store: store, Leader: l, Grace: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	granted := time.Now()
	a := tickAhead(filepath.Join(t.TempDir(), "ran"), granted.Add(PreGrantLead), granted, 30*time.Second)
	a.Run.Output = "reports/tick.txt"
	if err := w.Accept(a); err != nil {
		t.Fatal(err)
	}
	if c := l.completion(t); c.State != jobs.Succeeded {
		t.Fatalf("completion %+v: want succeeded", c)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if len(l.asked) == 0 || l.asked[0].Before(established) {
		t.Errorf("start asked at %v, the store took the token at %s: want the ask after it", l.asked, established)
	}
}

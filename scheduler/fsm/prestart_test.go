package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestDecidePreStartExpiry(t *testing.T) {
	pending := jobs.Attempt{ID: "report@1.1", State: jobs.Pending, GrantedAt: t0, Token: jobs.Fence{Epoch: 4, Seq: 20}}
	running := pending
	running.State, running.StartedAt = jobs.Running, t0.Add(time.Second)
	earlier := pending
	earlier.Token = jobs.Fence{Epoch: 3, Seq: 20}
	for _, tc := range []struct {
		name string
		a    jobs.Attempt
		at   time.Time
		ok   bool
	}{
		{"pending, granted this term, a short lease after the grant", pending, t0.Add(time.Second), true},
		{"pending, long after the grant", pending, t0.Add(time.Minute), true},
		{"less than a short lease after the grant", pending, t0.Add(999 * time.Millisecond), false},
		{"started", running, t0.Add(2 * time.Second), false},
		{"granted by an earlier leader", earlier, t0.Add(2 * time.Second), false},
	} {
		err := DecidePreStartExpiry(jobs.Run{Attempts: []jobs.Attempt{tc.a}}, tc.a, time.Second, tc.at, 4, 4, 10)
		if got := err == nil; got != tc.ok || (err != nil && !errors.Is(err, ErrPreStartLeaseHeld)) {
			t.Errorf("%s: DecidePreStartExpiry = %v, want allowed %v", tc.name, err, tc.ok)
		}
	}
}

// An expiry for the short lease before the start takes the run over at
// once, on another worker, without using a retry; one the replicated
// state says cannot be right changes nothing; a version 7 entry never
// carried the claim.
func TestFSM_PreStartExpiry(t *testing.T) {
	setup := func(t *testing.T) (*FSM, jobs.Run) {
		f := NewFSM()
		spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true", LeaseTTL: jobs.Duration(6 * time.Second)} // retries: 0; short lease 1 s
		applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
		electedAt(t, f, 2, 9)
		return f, applyAt(t, f, 2, 10, grant("report", t0)).Run
	}
	expire := func(id string, at time.Time) replicated.Command {
		return replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: id, State: jobs.Lost, Reason: "lease before the start expired", Worker: "w2", At: at, NeverStarted: true, BeforeStart: true}}
	}

	t.Run("taken over", func(t *testing.T) {
		f, run := setup(t)
		res := applyAt(t, f, 2, 11, expire(run.Attempts[0].ID, t0.Add(time.Second)))
		if res.Err != nil || len(res.Run.Attempts) != 2 || !res.Run.Attempts[0].NeverStarted || res.Run.Attempts[1].Worker != "w2" {
			t.Fatalf("expiry before the start: %v, attempts %+v; want the first never started and a takeover on w2", res.Err, res.Run.Attempts)
		}
		if a, b := res.Run.Attempts[0].Token, res.Run.Attempts[1].Token; !a.Less(b) {
			t.Errorf("takeover token %s, want newer than %s", b, a)
		}
	})
	t.Run("too soon after the grant", func(t *testing.T) {
		f, run := setup(t)
		res := applyAt(t, f, 2, 11, expire(run.Attempts[0].ID, t0.Add(500*time.Millisecond)))
		if !errors.Is(res.Err, ErrPreStartLeaseHeld) {
			t.Fatalf("expiry half a short lease after the grant: %v, want ErrPreStartLeaseHeld", res.Err)
		}
		if got, _ := f.Run(run.ID); len(got.Attempts) != 1 || got.Attempts[0].State != jobs.Pending {
			t.Errorf("after a refused expiry: attempts %+v, want the one attempt still pending", got.Attempts)
		}
	})
	t.Run("started", func(t *testing.T) {
		f, run := setup(t)
		applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpStart, Start: &replicated.StartCmd{Attempt: run.Attempts[0].ID, At: t0}})
		if res := applyAt(t, f, 2, 12, expire(run.Attempts[0].ID, t0.Add(2*time.Second))); !errors.Is(res.Err, ErrPreStartLeaseHeld) || len(res.Run.Attempts) != 1 || res.Run.Attempts[0].State != jobs.Running {
			t.Errorf("expiry before the start of a started attempt: %v, attempts %+v; want refused, still running", res.Err, res.Run.Attempts)
		}
	})
	t.Run("granted by an earlier leader", func(t *testing.T) {
		f, run := setup(t)
		electedAt(t, f, 3, 11)
		if res := applyAt(t, f, 3, 12, expire(run.Attempts[0].ID, t0.Add(2*time.Second))); !errors.Is(res.Err, ErrPreStartLeaseHeld) || len(res.Run.Attempts) != 1 {
			t.Errorf("a later leader's expiry before the start: %v, attempts %+v; want refused", res.Err, res.Run.Attempts)
		}
	})
	t.Run("a version 7 entry", func(t *testing.T) {
		f, run := setup(t)
		b, err := EncodeEntry(expire(run.Attempts[0].ID, t0.Add(500*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), fmt.Sprintf(`"v":%d`, replicated.LogVersion), `"v":7`, 1))
		// Version 7 knows no before_start: the expiry is applied as every
		// expiry was.
		if res := applyRaw(t, f, 2, 11, b); res.Err != nil || len(res.Run.Attempts) != 2 {
			t.Errorf("a version 7 expiry: %v, attempts %+v; want applied with its takeover", res.Err, res.Run.Attempts)
		}
	})
}

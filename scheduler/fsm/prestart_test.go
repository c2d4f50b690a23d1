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
	earlierLogged := earlier
	earlierLogged.StartInLog = true
	confirmed := earlierLogged
	confirmed.StartConfirmed = true
	thisTermConfirmed := pending
	thisTermConfirmed.StartInLog, thisTermConfirmed.StartConfirmed = true, true
	v11 := Expiry{Entry: 4, Elected: 4, ElectedIndex: 10, Version: replicated.VersionStartsInLog}
	v10 := v11
	v10.Version = replicated.VersionACL
	for _, tc := range []struct {
		name string
		a    jobs.Attempt
		at   time.Time
		e    Expiry
		ok   bool
	}{
		{"pending, granted this term, a short lease after the grant", pending, t0.Add(time.Second), v11, true},
		{"pending, long after the grant", pending, t0.Add(time.Minute), v11, true},
		{"less than a short lease after the grant", pending, t0.Add(999 * time.Millisecond), v11, false},
		{"started", running, t0.Add(2 * time.Second), v11, false},
		{"granted by an earlier leader", earlier, t0.Add(2 * time.Second), v11, false},
		{"granted by an earlier leader, its start confirmed in the log and no confirmation", earlierLogged, t0.Add(2 * time.Second), v11, true},
		{"granted by an earlier leader, its start confirmed", confirmed, t0.Add(2 * time.Second), v11, false},
		{"granted this term, its start confirmed", thisTermConfirmed, t0.Add(2 * time.Second), v11, false},
		{"granted by an earlier leader, in the log, but a version 10 expiry", earlierLogged, t0.Add(2 * time.Second), v10, false},
	} {
		err := DecidePreStartExpiry(jobs.Run{Attempts: []jobs.Attempt{tc.a}}, tc.a, time.Second, tc.at, tc.e)
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

// An attempt granted ahead has its start confirmed in the log (version
// 11), so a later leader may take it over on the short lease while the
// state shows no confirmation, and may not once it does; a confirmation
// the log orders after the expiry is refused.
func TestFSM_StartsConfirmedInLog(t *testing.T) {
	setup := func(t *testing.T) (*FSM, jobs.Run) {
		f := NewFSM()
		spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true", LeaseTTL: jobs.Duration(6 * time.Second)} // short lease 1 s
		applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
		electedAt(t, f, 2, 9)
		g := grant("report", t0)
		g.Grant.Ahead, g.Grant.At = true, t0.Add(-2*time.Second)
		run := applyAt(t, f, 2, 10, g).Run
		if a := run.Attempts[0]; !a.StartInLog || a.StartConfirmed {
			t.Fatalf("granted ahead: %+v; want its start to be confirmed in the log, not yet confirmed", a)
		}
		return f, run
	}
	confirm := func(ids ...string) replicated.Command {
		return replicated.Command{Op: replicated.OpConfirmStarts, ConfirmStarts: &replicated.ConfirmStartsCmd{Attempts: ids, At: t0}}
	}
	expire := func(id string) replicated.Command {
		return replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: id, State: jobs.Lost, Reason: "lease before the start expired", Worker: "w2", At: t0, NeverStarted: true, BeforeStart: true}}
	}

	t.Run("a later leader takes an unconfirmed attempt over", func(t *testing.T) {
		f, run := setup(t)
		electedAt(t, f, 3, 11)
		res := applyAt(t, f, 3, 12, expire(run.Attempts[0].ID))
		if res.Err != nil || len(res.Run.Attempts) != 2 || !res.Run.Attempts[0].NeverStarted || res.Run.Attempts[1].Worker != "w2" {
			t.Fatalf("a later leader's expiry before the start: %v, attempts %+v; want the first never started and a takeover on w2", res.Err, res.Run.Attempts)
		}
	})
	t.Run("confirmed before the election", func(t *testing.T) {
		f, run := setup(t)
		res := applyAt(t, f, 2, 11, confirm(run.Attempts[0].ID))
		if got, _ := f.Run(run.ID); len(res.Batch) != 1 || res.Batch[0].Err != nil || !got.Attempts[0].StartConfirmed {
			t.Fatalf("confirm: %+v, attempts %+v; want the attempt's start confirmed", res, got.Attempts)
		}
		electedAt(t, f, 3, 12)
		if res := applyAt(t, f, 3, 13, expire(run.Attempts[0].ID)); !errors.Is(res.Err, ErrPreStartLeaseHeld) || len(res.Run.Attempts) != 1 || res.Run.Attempts[0].State != jobs.Pending {
			t.Errorf("a later leader's expiry before the start of a confirmed attempt: %v, attempts %+v; want refused, still pending", res.Err, res.Run.Attempts)
		}
	})
	t.Run("a confirmation after the expiry", func(t *testing.T) {
		f, run := setup(t)
		res := applyAt(t, f, 2, 11, expire(run.Attempts[0].ID))
		if res.Err != nil || len(res.Run.Attempts) != 2 {
			t.Fatalf("expiry: %v, attempts %+v", res.Err, res.Run.Attempts)
		}
		// The taken-over attempt, and its takeover (granted at once, not
		// ahead: its worker starts on the leader's word in memory).
		res = applyAt(t, f, 2, 12, confirm(run.Attempts[0].ID, res.Run.Attempts[1].ID))
		if res.Err != nil || len(res.Batch) != 2 {
			t.Fatalf("confirmations: %v, %d results; want one each", res.Err, len(res.Batch))
		}
		for i, r := range res.Batch {
			if !errors.Is(r.Err, ErrStartNotConfirmed) {
				t.Errorf("confirmation %d after the expiry: %v; want ErrStartNotConfirmed", i, r.Err)
			}
		}
		if got, _ := f.Run(run.ID); got.Attempts[0].StartConfirmed || got.Attempts[1].StartConfirmed {
			t.Errorf("after refused confirmations: %+v; want none confirmed", got.Attempts)
		}
	})
	t.Run("granted at the fire time", func(t *testing.T) {
		f := withJobs(t, "report")
		if a := applyAt(t, f, 2, 10, grant("report", t0)).Run.Attempts[0]; a.StartInLog {
			t.Errorf("granted at the fire time: %+v; want its start confirmed by the leader alone", a)
		}
	})
}

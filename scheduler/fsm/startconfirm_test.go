package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestDecideNeverStarted(t *testing.T) {
	tok := func(epoch, seq uint64) jobs.Attempt { return jobs.Attempt{Token: jobs.Fence{Epoch: epoch, Seq: seq}} }
	logged := func(a jobs.Attempt, confirmed bool) jobs.Attempt {
		a.StartInLog, a.StartConfirmed = true, confirmed
		return a
	}
	free := jobs.Run{Attempts: []jobs.Attempt{{NeverStarted: true}, {NeverStarted: true}}}
	full := jobs.Run{Attempts: []jobs.Attempt{{NeverStarted: true}, {NeverStarted: true}, {NeverStarted: true}}}
	for _, tc := range []struct {
		name                   string
		r                      jobs.Run
		a                      jobs.Attempt
		entry, elected, eIndex uint64
		want                   bool
	}{
		{"granted by this term's leader after its election", jobs.Run{}, tok(4, 20), 4, 4, 10, true},
		{"granted by an earlier leader", jobs.Run{}, tok(3, 20), 4, 4, 10, false},
		{"granted before this term's election entry", jobs.Run{}, tok(4, 9), 4, 4, 10, false},
		{"granted at the election entry's index", jobs.Run{}, tok(4, 10), 4, 4, 10, false},
		{"an entry of a term with no election entry yet", jobs.Run{}, tok(4, 20), 5, 4, 10, false},
		{"the run has had fewer than the most", free, tok(4, 20), 4, 4, 10, true},
		{"the run has had the most already", full, tok(4, 20), 4, 4, 10, false},
		{"granted by an earlier leader, its start in the log and not confirmed", jobs.Run{}, logged(tok(3, 20), false), 4, 4, 10, true},
		{"granted by an earlier leader, its start confirmed in the log", jobs.Run{}, logged(tok(3, 20), true), 4, 4, 10, false},
		{"granted this term, its start confirmed in the log", jobs.Run{}, logged(tok(4, 20), true), 4, 4, 10, false},
	} {
		e := Expiry{Entry: tc.entry, Elected: tc.elected, ElectedIndex: tc.eIndex, Version: replicated.VersionStartsInLog}
		if got := DecideNeverStarted(tc.r, tc.a, e); got != tc.want {
			t.Errorf("%s: DecideNeverStarted = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := CountedAttempts(jobs.Run{Attempts: append(full.Attempts, jobs.Attempt{})}); n != 1 {
		t.Errorf("CountedAttempts of three never started and one other = %d, want 1", n)
	}
}

// electedAt applies term's election entry at index, as a leader loop
// commits it before it grants.
func electedAt(t *testing.T, f *FSM, term, index uint64) {
	t.Helper()
	b, err := EncodeEntry(replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "test-leader", At: t0}})
	if err != nil {
		t.Fatal(err)
	}
	if res := applyRaw(t, f, term, index, b); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// An expiry on the granting leader's word that the attempt never started
// does not count against the job's retries: a job with none gets its
// takeover. The word counts only from the leader that granted the
// attempt after its election entry, only from log version 5, and only a
// few times a run.
func TestFSM_NeverStartedAttemptDoesNotCountAgainstRetries(t *testing.T) {
	setup := func(t *testing.T) (*FSM, jobs.Run) {
		f := NewFSM()
		spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true"} // retries: 0
		applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
		electedAt(t, f, 2, 9)
		return f, applyAt(t, f, 2, 10, grant("report", t0)).Run
	}
	expire := func(id string, never bool) replicated.Command {
		return replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: id, State: jobs.Lost, Reason: "lease expired", Worker: "w2", At: t0, NeverStarted: never}}
	}

	t.Run("the granting leader's word", func(t *testing.T) {
		f, run := setup(t)
		res := applyAt(t, f, 2, 11, expire(run.Attempts[0].ID, true))
		if res.Err != nil || len(res.Run.Attempts) != 2 || !res.Run.Attempts[0].NeverStarted || res.Run.Attempts[1].Worker != "w2" || res.Run.State != jobs.Pending {
			t.Fatalf("expiry of a never started attempt: %v, run %s with attempts %+v; want it marked, and a takeover on w2", res.Err, res.Run.State, res.Run.Attempts)
		}
		// The takeover is the run's one counted attempt: its own expiry
		// (it started) ends the run.
		res = applyAt(t, f, 2, 12, expire(res.Run.Attempts[1].ID, false))
		if res.Err != nil || len(res.Run.Attempts) != 2 || res.Run.State != jobs.Lost {
			t.Errorf("expiry of the takeover: %v, run %s with %d attempts; want lost, no third", res.Err, res.Run.State, len(res.Run.Attempts))
		}
	})
	t.Run("a later leader's word", func(t *testing.T) {
		f, run := setup(t)
		electedAt(t, f, 3, 11)
		res := applyAt(t, f, 3, 12, expire(run.Attempts[0].ID, true))
		if res.Err != nil || len(res.Run.Attempts) != 1 || res.Run.Attempts[0].NeverStarted || res.Run.State != jobs.Lost {
			t.Errorf("a later term's expiry: %v, run %s with attempts %+v; want counted: lost, no takeover", res.Err, res.Run.State, res.Run.Attempts)
		}
	})
	t.Run("a version 4 entry", func(t *testing.T) {
		f, run := setup(t)
		b, err := EncodeEntry(expire(run.Attempts[0].ID, true))
		if err != nil {
			t.Fatal(err)
		}
		// EncodeEntry writes this binary's version: write version 4 by hand.
		b = []byte(strings.Replace(string(b), fmt.Sprintf(`"v":%d`, replicated.LogVersion), `"v":4`, 1))
		res := applyRaw(t, f, 2, 11, b)
		if res.Err != nil || len(res.Run.Attempts) != 1 || res.Run.Attempts[0].NeverStarted {
			t.Errorf("a version 4 expiry: %v, attempts %+v; want counted", res.Err, res.Run.Attempts)
		}
	})
	t.Run("at most maxNeverStarted a run", func(t *testing.T) {
		f, run := setup(t)
		index := uint64(11)
		for range maxNeverStarted + 1 {
			latest, _ := run.Latest()
			run = applyAt(t, f, 2, index, expire(latest.ID, true)).Run
			index++
		}
		if len(run.Attempts) != maxNeverStarted+1 || CountedAttempts(run) != 1 || run.State != jobs.Lost {
			t.Errorf("after %d expiries never started: run %s with %d attempts, %d counted; want lost with %d, 1 counted", maxNeverStarted+1, run.State, len(run.Attempts), CountedAttempts(run), maxNeverStarted+1)
		}
	})
}

// A worker that gives an attempt up before starting it (it shuts down
// before the fire time) says so in its completion: the attempt does not
// count against the job's retries. Only the attempt's own worker's word
// counts, only from log version 5, and not once the lease was taken.
func TestFSM_WorkersWordThatItNeverStarted(t *testing.T) {
	setup := func(t *testing.T) (*FSM, jobs.Run) {
		f := NewFSM()
		spec := jobs.Spec{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true"} // retries: 0
		applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{spec}, Source: "test"}})
		return f, applyAt(t, f, 2, 10, grant("report", t0)).Run
	}
	started := func(id string) replicated.Command {
		return replicated.Command{Op: replicated.OpStart, Start: &replicated.StartCmd{Attempt: id, At: t0}}
	}
	gaveUp := func(id, node string) replicated.Command {
		return replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: id, Node: node, State: jobs.Lost, Error: "worker shutting down before the fire time", EndedAt: t0, NeverStarted: true}}
	}
	for _, tc := range []struct {
		name    string
		node    string
		before  func(id string) replicated.Command // applied before the completion
		version int
		free    bool
	}{
		{"its own worker", "w1", nil, replicated.LogVersion, true},
		{"another node", "w2", nil, replicated.LogVersion, false},
		{"after the lease was taken", "w1", func(id string) replicated.Command {
			return replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: id, State: jobs.Lost, Reason: "lease expired", At: t0}}
		}, replicated.LogVersion, false},
		{"after its start was recorded", "w1", started, replicated.LogVersion, false},
		{"a version 4 entry", "w1", nil, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, run := setup(t)
			id := run.Attempts[0].ID
			if tc.before != nil {
				applyAt(t, f, 2, 11, tc.before(id))
			}
			b, err := EncodeEntry(gaveUp(id, tc.node))
			if err != nil {
				t.Fatal(err)
			}
			b = []byte(strings.Replace(string(b), fmt.Sprintf(`"v":%d`, replicated.LogVersion), fmt.Sprintf(`"v":%d`, tc.version), 1))
			res := applyRaw(t, f, 2, 12, b)
			a := res.Run.Attempts[0]
			if res.Err != nil || a.NeverStarted != tc.free || AwaitsRetry(res.Run) != tc.free {
				t.Errorf("%v, run %s, attempt never started %v; want never started and awaiting its retry: %v", res.Err, res.Run.State, a.NeverStarted, tc.free)
			}
		})
	}
}

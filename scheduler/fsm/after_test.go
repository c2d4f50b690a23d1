package fsm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func code(n int) *int { return &n }

// chainFSM is an FSM with a → b → c (b after a, c after b), each job
// notifying a webhook on failed, skipped and recovered.
func chainFSM(t *testing.T) *FSM {
	t.Helper()
	f := NewFSM()
	n := []jobs.Notify{{On: []string{"failed", "skipped", "recovered"}, Webhook: "http://127.0.0.1:1/hook"}}
	specs := []jobs.Spec{
		{Name: "a", Schedules: []string{"@every 5s"}, Shell: "true", Notify: n},
		{Name: "b", After: []string{"a"}, Shell: "true", Notify: n},
		{Name: "c", After: []string{"b"}, Shell: "true"},
	}
	if res := applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "test"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	return f
}

func complete(attempt string, st jobs.State, exit int, workers map[string]string) replicated.Command {
	return replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: attempt, State: st, ExitCode: code(exit), EndedAt: t0.Add(time.Second)},
		Follow: &replicated.FollowCmd{Workers: workers, At: t0.Add(time.Second)}}
}

func TestFSM_AfterGrantsInTheEntryThatFinishesTheParent(t *testing.T) {
	f := chainFSM(t)
	ra := applyAt(t, f, 2, 10, grant("a", t0))
	if ra.Err != nil {
		t.Fatal(ra.Err)
	}
	// a succeeds in entry 11: b is granted in that entry, c waits.
	if res := applyAt(t, f, 2, 11, complete(ra.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"b": "w2"})); res.Err != nil {
		t.Fatal(res.Err)
	}
	b, ok := f.Run(jobs.RunID("b", t0))
	if !ok {
		t.Fatal("b has no run after a succeeded")
	}
	att, _ := b.Latest()
	if got, want := att.Token, (jobs.Fence{Epoch: 2, Seq: 11}); got != want {
		t.Errorf("b's token = %v, want %v (the index of a's completion)", got, want)
	}
	if att.Worker != "w2" || b.Trigger != TriggerAfter || b.ScheduledAt != t0 {
		t.Errorf("b = worker %s, trigger %s, scheduled %s", att.Worker, b.Trigger, b.ScheduledAt)
	}
	if got, want := strings.Join(b.After, ","), jobs.RunID("a", t0); got != want {
		t.Errorf("b.After = %s, want %s", got, want)
	}
	if _, ok := f.Run(jobs.RunID("c", t0)); ok {
		t.Error("c has a run before b finished")
	}
	// b succeeds in entry 14: c follows with token 14.
	applyAt(t, f, 3, 14, complete(att.ID, jobs.Succeeded, 0, map[string]string{"c": "w1"}))
	c, ok := f.Run(jobs.RunID("c", t0))
	if !ok {
		t.Fatal("c has no run after b succeeded")
	}
	if got, want := c.Attempts[0].Token, (jobs.Fence{Epoch: 3, Seq: 14}); got != want {
		t.Errorf("c's token = %v, want %v", got, want)
	}
	// A snapshot carries it all.
	g := snapshotRestored(t, f)
	if _, ok := g.Run(jobs.RunID("c", t0)); !ok {
		t.Error("restored state lost c's run")
	}
}

func TestFSM_AfterSkipsTheChainWhenAParentFails(t *testing.T) {
	f := chainFSM(t)
	ra := applyAt(t, f, 2, 10, grant("a", t0))
	applyAt(t, f, 2, 11, complete(ra.Run.Attempts[0].ID, jobs.Failed, 3, map[string]string{"b": "w2"}))
	for _, job := range []string{"b", "c"} {
		r, ok := f.Run(jobs.RunID(job, t0))
		if !ok {
			t.Fatalf("%s has no run after a failed", job)
		}
		if r.State != jobs.Skipped || len(r.Attempts) != 0 {
			t.Errorf("%s = %s with %d attempts, want skipped without any", job, r.State, len(r.Attempts))
		}
	}
	b, _ := f.Run(jobs.RunID("b", t0))
	if !strings.Contains(b.Reason, "parent a") || !strings.Contains(b.Reason, "failed") {
		t.Errorf("b's reason %q does not name parent a and its failure", b.Reason)
	}
	c, _ := f.Run(jobs.RunID("c", t0))
	if !strings.Contains(c.Reason, "parent b") {
		t.Errorf("c's reason %q does not name parent b", c.Reason)
	}
	// a's failure and b's skip are notified, once each.
	ns := f.Notices()
	if len(ns) != 2 || ns[0].Job != "a" || ns[0].State != "failed" || ns[1].Job != "b" || ns[1].State != "skipped" {
		t.Fatalf("notices = %+v, want a failed and b skipped", ns)
	}
	if *ns[0].ExitCode != 3 || ns[0].Token == nil || ns[0].Token.Seq != 10 || ns[0].Worker != "w1" || !ns[0].Final {
		t.Errorf("a's notice = %+v", ns[0])
	}
	// A snapshot carries the pending notices.
	if got := snapshotRestored(t, f).Notices(); len(got) != 2 || got[1].ID != ns[1].ID {
		t.Errorf("restored notices = %+v", got)
	}
	// Recording a delivery removes it; recording it again changes nothing.
	d := replicated.Command{Op: replicated.OpNotified, Notified: &replicated.NotifiedCmd{Deliveries: []replicated.Delivery{{ID: ns[0].ID, Tries: 1}}, At: t0}}
	applyAt(t, f, 2, 12, d)
	applyAt(t, f, 2, 13, d)
	if got := f.Notices(); len(got) != 1 || got[0].ID != ns[1].ID {
		t.Errorf("after recording a's delivery twice, pending = %+v", got)
	}
	if n := f.Counters()[CounterNotified]; n != 1 {
		t.Errorf("notified counter = %d, want 1", n)
	}
}

func TestFSM_RecoveredIsTheFirstSuccessAfterAFailure(t *testing.T) {
	f := chainFSM(t)
	r1 := applyAt(t, f, 2, 10, grant("a", t0))
	applyAt(t, f, 2, 11, complete(r1.Run.Attempts[0].ID, jobs.Failed, 1, nil))
	r2 := applyAt(t, f, 2, 12, grant("a", t0.Add(5*time.Second)))
	applyAt(t, f, 2, 13, complete(r2.Run.Attempts[0].ID, jobs.Succeeded, 0, nil))
	r3 := applyAt(t, f, 2, 14, grant("a", t0.Add(10*time.Second)))
	applyAt(t, f, 2, 15, complete(r3.Run.Attempts[0].ID, jobs.Succeeded, 0, nil))
	var states []string
	for _, n := range f.Notices() {
		if n.Job == "a" {
			states = append(states, n.State+"@"+n.Run)
		}
	}
	want := []string{"failed@" + r1.Run.ID, "recovered@" + r2.Run.ID}
	if strings.Join(states, " ") != strings.Join(want, " ") {
		t.Errorf("a's notices = %v, want %v", states, want)
	}
}

func TestFSM_OlderEntriesNeitherFollowNorNotify(t *testing.T) {
	f := chainFSM(t)
	ra := applyAt(t, f, 2, 10, grant("a", t0))
	c := complete(ra.Run.Attempts[0].ID, jobs.Failed, 1, map[string]string{"b": "w2"})
	c.V = 3
	b, err := EncodeEntry(c)
	if err != nil {
		t.Fatal(err)
	}
	// EncodeEntry writes this binary's version: write version 3 by hand.
	b = []byte(strings.Replace(string(b), fmt.Sprintf(`"v":%d`, replicated.LogVersion), `"v":3`, 1))
	applyRaw(t, f, 2, 11, b)
	if _, ok := f.Run(jobs.RunID("b", t0)); ok {
		t.Error("a version 3 entry decided a dependent run")
	}
	if n := len(f.Notices()); n != 0 {
		t.Errorf("a version 3 entry recorded %d notices", n)
	}
}

func TestDecideFollow(t *testing.T) {
	ok := &jobs.Run{ID: "p@1", State: jobs.Succeeded}
	open := &jobs.Run{ID: "q@1", State: jobs.Running}
	bad := &jobs.Run{ID: "q@1", State: jobs.TimedOut}
	for _, tc := range []struct {
		name    string
		in      FollowInput
		verdict FollowVerdict
		reason  string
	}{
		{"all succeeded", FollowInput{After: []string{"p"}, Parents: map[string]*jobs.Run{"p": ok}, Worker: "w"}, FollowGrant, ""},
		{"one open", FollowInput{After: []string{"p", "q"}, Parents: map[string]*jobs.Run{"p": ok, "q": open}, Worker: "w"}, FollowWait, ""},
		{"one missing", FollowInput{After: []string{"p", "q"}, Parents: map[string]*jobs.Run{"p": ok}, Worker: "w"}, FollowWait, ""},
		{"one failed, one open", FollowInput{After: []string{"p", "q"}, Parents: map[string]*jobs.Run{"p": open, "q": bad}}, FollowSkip, "parent q"},
		{"already decided", FollowInput{After: []string{"p"}, Parents: map[string]*jobs.Run{"p": ok}, Existing: ok, Worker: "w"}, FollowNone, ""},
		{"no worker", FollowInput{After: []string{"p"}, Parents: map[string]*jobs.Run{"p": ok}}, FollowSkip, "no alive worker"},
		{"paused", FollowInput{After: []string{"p"}, Parents: map[string]*jobs.Run{"p": ok}, Worker: "w", Paused: true}, FollowSkip, "paused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideFollow(tc.in)
			if d.Verdict != tc.verdict || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("DecideFollow = %+v, want verdict %d with reason containing %q", d, tc.verdict, tc.reason)
			}
		})
	}
}

func TestDecideNotices(t *testing.T) {
	list := []jobs.Notify{
		{On: []string{"failed"}, Webhook: "http://127.0.0.1/a"},
		{On: []string{"succeeded", "recovered"}, Email: []string{"ops@example.test"}},
	}
	run := &jobs.Run{ID: "j@1", Job: "j", State: jobs.Pending, Attempts: []jobs.Attempt{{ID: "j@1#1", Number: 1, State: jobs.Failed}}}
	if got := DecideNotices(list, run, &run.Attempts[0], ""); len(got) != 1 || got[0].State != "failed" || got[0].Final {
		t.Errorf("a failed attempt with a retry to come: %+v", got)
	}
	run = &jobs.Run{ID: "j@2", Job: "j", State: jobs.Succeeded, Attempts: []jobs.Attempt{{ID: "j@2#1", Number: 1, State: jobs.Succeeded}}}
	if got := DecideNotices(list, run, &run.Attempts[0], jobs.Failed); len(got) != 1 || got[0].State != jobs.NotifyRecovered || got[0].Kind() != jobs.NotifyEmail {
		t.Errorf("success after a failure: %+v, want one recovered email", got)
	}
	if got := DecideNotices(list, run, &run.Attempts[0], jobs.Succeeded); len(got) != 1 || got[0].State != "succeeded" {
		t.Errorf("success after a success: %+v, want one succeeded", got)
	}
}

// A job set applied again in another order has the same hash; the
// followers of a run are still decided in the set's order now, on the
// replica that applied both sets as on one that restored the second from
// a snapshot, so both record the same runs in the same order.
func TestFSM_FollowersInTheOrderOfTheSetNow(t *testing.T) {
	a := jobs.Spec{Name: "a", Schedules: []string{"@every 5s"}, Shell: "true"}
	b := jobs.Spec{Name: "b", After: []string{"a"}, Shell: "true"}
	c := jobs.Spec{Name: "c", After: []string{"a"}, Shell: "true"}
	f := NewFSM()
	setJobs := func(index uint64, specs ...jobs.Spec) {
		t.Helper()
		if res := applyAt(t, f, 1, index, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "test"}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	setJobs(1, a, b, c)
	ra := applyAt(t, f, 2, 10, grant("a", t0))
	// A follow-up decided before the reordering fills the index.
	applyAt(t, f, 2, 11, complete(ra.Run.Attempts[0].ID, jobs.Failed, 1, nil))
	setJobs(12, a, c, b)
	g := snapshotRestored(t, f)
	next := applyAt(t, f, 2, 13, grant("a", t0.Add(5*time.Second)))
	applyAt(t, g, 2, 13, grant("a", t0.Add(5*time.Second)))
	done := complete(next.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"b": "w1", "c": "w1"})
	applyAt(t, f, 2, 14, done)
	applyAt(t, g, 2, 14, done)
	ids := func(fsm *FSM) string {
		var out []string
		for _, r := range fsm.Runs(RunFilter{}) {
			out = append(out, r.ID)
		}
		return strings.Join(out, " ")
	}
	if live, restored := ids(f), ids(g); live != restored {
		t.Errorf("runs, newest first:\n applied: %s\nrestored: %s\nwant the same", live, restored)
	}
	if r := f.Runs(RunFilter{Limit: 1}); len(r) != 1 || r[0].Job != "b" {
		t.Errorf("newest run %+v: want b's, granted after c's as the set now lists them", r)
	}
}

// TestFSM_AfterTakesTheKeyItsLeaderRendered: a run that follows its
// parents gets the output key the entry carries, rendered by the leader;
// Apply executes no template, so a template that would take a server's
// time (here one that the entry says did not render) costs the replicas
// nothing. Without a key in the entry the run is skipped, saying why. An
// entry of version 6 still renders the key, as its servers did.
func TestFSM_AfterTakesTheKeyItsLeaderRendered(t *testing.T) {
	keyed := func(t *testing.T) (*FSM, string) {
		f := NewFSM()
		specs := []jobs.Spec{
			{Name: "a", Schedules: []string{"@every 5s"}, Shell: "true"},
			{Name: "b", After: []string{"a"}, Shell: "true", Output: `b/{{ .Scheduled.Format "2006" }}.txt`},
		}
		if res := applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "test"}}); res.Err != nil {
			t.Fatal(res.Err)
		}
		ra := applyAt(t, f, 2, 10, grant("a", t0))
		if ra.Err != nil {
			t.Fatal(ra.Err)
		}
		return f, ra.Run.Attempts[0].ID
	}
	bID := jobs.RunID("b", t0)
	for _, tc := range []struct {
		name    string
		outputs map[string]replicated.FollowOutput
		version int
		state   jobs.State
		output  string
		reason  string
	}{
		{"the leader's key", map[string]replicated.FollowOutput{bID: {Key: "b/from-the-leader.txt"}}, replicated.LogVersion, jobs.Pending, "b/from-the-leader.txt", ""},
		{"the leader could not render it", map[string]replicated.FollowOutput{bID: {Err: "output template: over its bound"}}, replicated.LogVersion, jobs.Skipped, "", "output template: over its bound"},
		{"no key in the entry", nil, replicated.LogVersion, jobs.Skipped, "", "the leader proposed no output key for it"},
		{"a key the store would refuse", map[string]replicated.FollowOutput{bID: {Key: "../evil"}}, replicated.LogVersion, jobs.Skipped, "", "not a store key"},
		{"an entry of version 6 renders it", nil, 6, jobs.Pending, "b/" + t0.Format("2006") + ".txt", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, attempt := keyed(t)
			c := complete(attempt, jobs.Succeeded, 0, map[string]string{"b": "w2"})
			c.Follow.Outputs = tc.outputs
			b, err := EncodeEntry(c)
			if err != nil {
				t.Fatal(err)
			}
			b = []byte(strings.Replace(string(b), fmt.Sprintf(`"v":%d`, replicated.LogVersion), fmt.Sprintf(`"v":%d`, tc.version), 1))
			if res := applyRaw(t, f, 2, 11, b); res.Err != nil {
				t.Fatal(res.Err)
			}
			r, ok := f.Run(bID)
			if !ok {
				t.Fatal("b has no run after a succeeded")
			}
			if r.State != tc.state || r.Output != tc.output || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("b's run: %s, output %q, reason %q; want %s, %q, a reason naming %q", r.State, r.Output, r.Reason, tc.state, tc.output, tc.reason)
			}
		})
	}
}

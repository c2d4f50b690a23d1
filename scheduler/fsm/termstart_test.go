package fsm

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

func TestDecideTermStarted(t *testing.T) {
	cases := []struct {
		name           string
		version        int
		mints          bool
		entry, elected uint64
		refused        bool
	}{
		{"v4 mint in the elected epoch", 4, true, 5, 5, false},
		{"v4 mint in an epoch without its election", 4, true, 6, 5, true},
		{"v4 mint before any election", 4, true, 1, 0, true},
		{"v4 entry that mints nothing", 4, false, 6, 5, false},
		{"v3 mint in an epoch without its election", 3, true, 6, 5, false},
		{"v1 mint in an epoch without its election", 1, true, 6, 5, false},
	}
	for _, tc := range cases {
		err := DecideTermStarted(tc.version, tc.mints, tc.entry, tc.elected)
		if got := errors.Is(err, ErrTermNotStarted); got != tc.refused {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
		}
	}
}

// rawEntry encodes c as an entry of log version v, without applyAt's
// election entry.
func rawEntry(t *testing.T, v int, c replicated.Command) []byte {
	t.Helper()
	c.V = v
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A version 4 grant in a term whose election entry is not in the log is
// refused and changes nothing; after the election entry the same grant
// applies; a version 3 grant applies as before.
func TestFSM_GrantInTermNotStartedRefused(t *testing.T) {
	f := withJobs(t, "report", "other")
	elect := func(term, index uint64) {
		t.Helper()
		if res := applyRaw(t, f, term, index, rawEntry(t, replicated.LogVersion, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}})); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	elect(23, 2)
	before := f.Counters()
	events := len(f.Events(0, 1000))

	res := applyRaw(t, f, 24, 3, rawEntry(t, 4, grant("report", t0)))
	if !errors.Is(res.Err, ErrTermNotStarted) || !strings.Contains(res.Err.Error(), "epoch 24 has no election entry yet") {
		t.Fatalf("v4 grant in term 24 after the election of 23: %v, want ErrTermNotStarted", res.Err)
	}
	if _, ok := f.Run(jobs.RunID("report", t0)); ok {
		t.Error("the refused grant recorded its run")
	}
	if got := f.Counters(); !maps.Equal(got, before) {
		t.Errorf("counters after the refusal %v, want %v", got, before)
	}
	if n := len(f.Events(0, 1000)); n != events {
		t.Errorf("%d events after the refusal, want %d", n, events)
	}
	for name, c := range map[string]replicated.Command{
		"grants": {Op: replicated.OpGrants, Grants: &replicated.GrantsCmd{Grants: []replicated.GrantCmd{*grant("report", t0).Grant}}},
		"retry":  {Op: replicated.OpRetry, Retry: &replicated.RetryCmd{Run: jobs.RunID("report", t0), After: 1, Worker: "w1", At: t0}},
	} {
		if res := applyRaw(t, f, 24, 3, rawEntry(t, 4, c)); !errors.Is(res.Err, ErrTermNotStarted) {
			t.Errorf("v4 %s in term 24: %v, want ErrTermNotStarted", name, res.Err)
		}
	}

	// Written by an older leader, the same grant applies as it always did.
	res = applyRaw(t, f, 24, 4, rawEntry(t, 3, grant("report", t0)))
	if res.Err != nil {
		t.Fatalf("v3 grant in term 24: %v", res.Err)
	}
	if a, ok := res.Run.Latest(); !ok || a.Token != (jobs.Fence{Epoch: 24, Seq: 4}) {
		t.Errorf("v3 grant: %+v, want an attempt with token 24.4", res.Run)
	}

	elect(24, 5)
	res = applyRaw(t, f, 24, 6, rawEntry(t, 4, grant("other", t0.Add(5*time.Second))))
	if res.Err != nil {
		t.Fatalf("v4 grant after the election entry of 24: %v", res.Err)
	}
	if a, ok := res.Run.Latest(); !ok || a.Token != (jobs.Fence{Epoch: 24, Seq: 6}) {
		t.Errorf("grant after the election entry: %+v, want an attempt with token 24.6", res.Run)
	}
}

// A takeover expiry mints the next attempt's token: in a term not
// started it is refused whole (the attempt stays open for the new term's
// loop to expire again), while a completion, which mints nothing, applies.
func TestFSM_TermNotStartedKeepsCompletionsRefusesTakeovers(t *testing.T) {
	f := withJobs(t, "a", "b")
	applyRaw(t, f, 2, 2, rawEntry(t, 4, replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1", At: t0}}))
	ra := applyRaw(t, f, 2, 3, rawEntry(t, 4, grant("a", t0))).Run
	rb := applyRaw(t, f, 2, 4, rawEntry(t, 4, grant("b", t0))).Run
	if len(ra.Attempts) != 1 || len(rb.Attempts) != 1 {
		t.Fatalf("grants in the started term: %+v %+v", ra, rb)
	}

	exp := replicated.Command{Op: replicated.OpExpire, Expire: &replicated.ExpireCmd{Attempt: ra.Attempts[0].ID, State: jobs.Lost, Reason: "lease expired", Worker: "w2", At: t0}}
	if res := applyRaw(t, f, 3, 5, rawEntry(t, 4, exp)); !errors.Is(res.Err, ErrTermNotStarted) {
		t.Fatalf("takeover expiry in term 3: %v, want ErrTermNotStarted", res.Err)
	}
	if r, _ := f.Run(ra.ID); len(r.Attempts) != 1 || r.Attempts[0].State != jobs.Pending {
		t.Errorf("after the refused takeover: %+v, want its one attempt still pending", r.Attempts)
	}
	done := replicated.Command{Op: replicated.OpComplete, Complete: &replicated.Completion{Attempt: rb.Attempts[0].ID, State: jobs.Succeeded, EndedAt: t0}}
	if res := applyRaw(t, f, 3, 6, rawEntry(t, 4, done)); res.Err != nil {
		t.Fatalf("completion in term 3: %v", res.Err)
	}
	if r, _ := f.Run(rb.ID); r.State != jobs.Succeeded {
		t.Errorf("completed run %s, want succeeded", r.State)
	}
}

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// apply against a node holding most of the file's jobs sends the node
// the jobs' digests and then only the new and changed jobs whole, and the
// node ends with the file's set, as if the whole set had been sent: the
// job removed from the file is gone, the changed one changed, the new one
// there. With -json it writes the applied set's answer alone.
func TestApply_SendsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	job := func(name, schedule string) string {
		return "  - name: " + name + "\n    schedule: \"" + schedule + "\"\n    shell: 'true'\n"
	}
	d, addr := startDevJobs(t, job("alpha", "0 0 1 1 *")+job("beta", "0 0 1 1 *")+job("gamma", "0 0 1 1 *")+
		job("delta", "0 0 1 1 *")+job("epsilon", "0 0 1 1 *"))
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	write := func(body string) {
		if err := os.WriteFile(file, []byte("jobs:\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// alpha removed, beta changed, zeta new; gamma, delta and epsilon as
	// they were.
	write(job("beta", "0 0 2 1 *") + job("gamma", "0 0 1 1 *") + job("delta", "0 0 1 1 *") +
		job("epsilon", "0 0 1 1 *") + job("zeta", "@daily"))
	out, err := cli(t, "apply", "-addr", addr, file)
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if !strings.Contains(out, "applied 5 jobs from ") || !strings.Contains(out, "sent 2 new or changed jobs whole; the node had the other 3\n") {
		t.Errorf("apply said:\n%s\nwant 5 jobs applied, 2 of them sent", out)
	}
	var set wire.JobSet
	if err := proctest.GetJSON(d.base+"/api/v1/jobset", &set); err != nil {
		t.Fatal(err)
	}
	var names []string
	schedules := map[string]string{}
	for _, s := range set.Jobs {
		names = append(names, s.Name)
		schedules[s.Name] = strings.Join(s.Schedules, ",")
	}
	slices.Sort(names)
	if want := []string{"beta", "delta", "epsilon", "gamma", "zeta"}; !slices.Equal(names, want) {
		t.Errorf("the node's jobs are %v; want %v", names, want)
	}
	if schedules["beta"] != "0 0 2 1 *" || schedules["zeta"] != "@daily" || schedules["gamma"] != "0 0 1 1 *" {
		t.Errorf("the node's schedules are %v; want beta's changed, zeta's as the file gives it, gamma's kept", schedules)
	}
	if !strings.Contains(out, "job set "+set.Info.Hash+"\n") {
		t.Errorf("apply said:\n%s\nwant the node's set hash %s", out, set.Info.Hash)
	}

	// The same file again: no job sent whole; and the answer, as JSON, is
	// the applied set's alone.
	out, err = cli(t, "apply", "-addr", addr, file)
	if err != nil || !strings.Contains(out, "sent 0 new or changed jobs whole; the node had the other 5\n") {
		t.Errorf("apply of the same file: %v\n%s\nwant no job sent whole", err, out)
	}
	out, err = cli(t, "apply", "-json", "-addr", addr, file)
	if err != nil {
		t.Fatalf("apply -json: %v\n%s", err, out)
	}
	var applied wire.JobSetApplied
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&applied); err != nil || dec.More() {
		t.Fatalf("apply -json wrote %q; want one JobSetApplied (%v)", out, err)
	}
	if applied.Jobs != 5 || applied.Hash != set.Info.Hash {
		t.Errorf("apply -json: %+v; want 5 jobs of hash %s", applied, set.Info.Hash)
	}
}

// A change to some jobs leaves the others firing as they were: across an
// apply that changes one job's schedule and adds another, a job every
// second has one run for each second, and the changed and the new job
// fire by the new set.
func TestApply_OtherJobsKeepFiring(t *testing.T) {
	t.Parallel()
	job := func(name, schedule string) string {
		// misfire all: a busy machine's late second is granted late, not
		// skipped, so a gap can only be a fire time the leader lost.
		return "  - name: " + name + "\n    schedule: \"" + schedule + "\"\n    shell: 'true'\n    overlap: allow\n    misfire: all\n    catchup_window: 1m\n"
	}
	d, addr := startDevJobs(t, job("tick", "* * * * * *")+job("other", "*/2 * * * * *"))
	seconds := func(name string) map[time.Time]int {
		var list wire.RunList
		if err := proctest.GetJSON(d.base+"/api/v1/runs?job="+name+"&limit=500", &list); err != nil {
			t.Fatal(err)
		}
		out := map[time.Time]int{}
		for _, r := range list.Runs {
			out[r.ScheduledAt.UTC()]++
		}
		return out
	}
	proctest.Eventually(t, 30*time.Second, "tick has 5 runs", func() error {
		if n := len(seconds("tick")); n < 5 {
			return fmt.Errorf("%d runs of tick", n)
		}
		return nil
	})
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(file, []byte("jobs:\n"+job("tick", "* * * * * *")+job("other", "*/3 * * * * *")+job("fresh", "* * * * * *")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cli(t, "apply", "-addr", addr, file); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	applied := time.Now().UTC().Truncate(time.Second)
	until := applied.Add(5 * time.Second)
	proctest.Eventually(t, 30*time.Second, "tick ran 5 seconds past the apply, and fresh twice", func() error {
		if _, ok := seconds("tick")[until]; !ok {
			return fmt.Errorf("no run of tick at %s", until)
		}
		if n := len(seconds("fresh")); n < 2 {
			return fmt.Errorf("%d runs of fresh", n)
		}
		return nil
	})
	ticks := seconds("tick")
	// From three seconds before the apply, or the job's first second.
	first := applied
	for at := range ticks {
		if at.Before(first) {
			first = at
		}
	}
	from := applied.Add(-3 * time.Second)
	if first.After(from) {
		from = first
	}
	for at := from; !at.After(until); at = at.Add(time.Second) {
		if n := ticks[at]; n != 1 {
			t.Errorf("tick has %d runs at %s, across an apply at about %s; want 1", n, at.Format(time.TimeOnly), applied.Format(time.TimeOnly))
		}
	}
	// The apply's own second and the next two are left out: a fire
	// time the leader's loop met before it took the change in is the
	// old set's, and a busy machine can hold that loop a second or more.
	newer := 0
	for at := range seconds("other") {
		if at.Before(applied.Add(3*time.Second)) || at.After(until) {
			continue
		}
		newer++
		if at.Second()%3 != 0 {
			t.Errorf("other ran at %s, after the apply made it every third second", at.Format(time.TimeOnly))
		}
	}
	if newer == 0 {
		t.Errorf("other did not run from %s to %s, where its new schedule has a time", applied.Add(3*time.Second).Format(time.TimeOnly), until.Format(time.TimeOnly))
	}
}

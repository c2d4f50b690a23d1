package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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

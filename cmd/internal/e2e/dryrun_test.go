package e2e

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// apply -dry-run against a real node prints the jobs added, removed and
// changed, field by field, and changes nothing: the job set's hash,
// source and time, its jobs, and the audit trail's applies stay as they
// were.
func TestApply_DryRunChangesNothing(t *testing.T) {
	t.Parallel()
	d, addr := startDevJobs(t, `  - name: alpha
    schedule: "0 0 1 1 *"
    shell: 'true'
  - name: beta
    schedule: "0 0 1 1 *"
    shell: 'true'
`)
	if out, err := cli(t, "pause", "-addr", addr, "beta"); err != nil {
		t.Fatalf("pause: %v %s", err, out)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "new.yaml")
	if err := os.WriteFile(file, []byte(`jobs:
  - name: beta
    schedule: "0 0 2 1 *"
    shell: 'true'
    timeout: 10m
  - name: gamma
    schedule: "@daily"
    shell: 'true'
`), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func() (wire.JobSet, int) {
		var set wire.JobSet
		if err := proctest.GetJSON(d.base+"/api/v1/jobset", &set); err != nil {
			t.Fatal(err)
		}
		var ev wire.EventList
		if err := proctest.GetJSON(d.base+"/api/v1/events?kind=jobs_applied", &ev); err != nil {
			t.Fatal(err)
		}
		return set, len(ev.Events)
	}
	before, applies := read()
	if applies == 0 || before.Info.Hash == "" {
		t.Fatalf("no applied job set to compare with: %+v, %d applies", before.Info, applies)
	}

	for _, target := range []string{file, dir} {
		out, err := cli(t, "apply", "-dry-run", "-addr", addr, target)
		if err != nil {
			t.Fatalf("apply -dry-run %s: %v\n%s", target, err, out)
		}
		for _, want := range []string{
			"+ gamma\n",
			"- alpha\n",
			"~ beta\n    schedule: \"0 0 1 1 *\" → \"0 0 2 1 *\"\n",
			"1 added, 1 removed, 1 changed; nothing applied",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("apply -dry-run %s lacks %q:\n%s", target, want, out)
			}
		}
		// Paused by pause, not by the file: not a change of the file's.
		if strings.Contains(out, "paused:") || strings.Contains(out, "timeout") {
			t.Errorf("apply -dry-run shows a field the file does not change:\n%s", out)
		}
	}
	out, err := cli(t, "apply", "-dry-run", "-json", "-addr", addr, file)
	// The field as the file names it, each value encoded once.
	if err != nil || !strings.Contains(out, `"added": [`) || !strings.Contains(out, `"field": "schedule"`) || !strings.Contains(out, `"old": "0 0 1 1 *"`) || strings.Contains(out, `\"`) {
		t.Errorf("apply -dry-run -json: %v\n%s", err, out)
	}

	after, appliesAfter := read()
	if !reflect.DeepEqual(before, after) || applies != appliesAfter {
		t.Errorf("the dry run changed the job set:\nbefore %+v (%d applies)\nafter  %+v (%d applies)", before, applies, after, appliesAfter)
	}
}

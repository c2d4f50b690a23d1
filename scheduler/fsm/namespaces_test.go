package fsm

import (
	"errors"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// Two jobs of one name in two namespaces are two jobs: a grant of each
// for the same time is a run of its own, with its own run id, token and
// output key under its namespace.
func TestFSM_SameNameInTwoNamespaces(t *testing.T) {
	f := NewFSM()
	specs := []jobs.Spec{
		{Name: "report", Schedules: []string{"@every 5s"}, Shell: "true", Output: "reports/{{ .RunID }}.txt"},
		{Name: "report", Namespace: "billing", Schedules: []string{"@every 5s"}, Shell: "true", Output: "reports/{{ .RunID }}.txt"},
	}
	for i := range specs {
		specs[i].Normalize()
	}
	if res := applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: specs, Source: "test"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	var grants []replicated.GrantCmd
	for i := range specs {
		key, err := specs[i].OutputKey(t0)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, replicated.GrantCmd{Job: specs[i].Name, ScheduledAt: t0, Output: key, Worker: "w1", Trigger: "schedule", At: t0})
	}
	res := applyAt(t, f, 2, 10, replicated.Command{Op: replicated.OpGrants, Grants: &replicated.GrantsCmd{Grants: grants}})
	if res.Err != nil || len(res.Batch) != 2 {
		t.Fatalf("grants: %+v", res)
	}
	want := []struct{ id, job, output string }{
		{"report@20260701T090005Z", "report", "reports/report@20260701T090005Z.txt"},
		{"billing:report@20260701T090005Z", "billing:report", "ns/billing/reports/billing:report@20260701T090005Z.txt"},
	}
	for i, w := range want {
		r := res.Batch[i]
		if r.Err != nil {
			t.Fatalf("grant %d: %v", i, r.Err)
		}
		if r.Run.ID != w.id || r.Run.Job != w.job || r.Run.Output != w.output {
			t.Errorf("run %d = id %q job %q output %q, want %q %q %q", i, r.Run.ID, r.Run.Job, r.Run.Output, w.id, w.job, w.output)
		}
		if runs := f.Runs(RunFilter{Job: w.job}); len(runs) != 1 || runs[0].ID != w.id {
			t.Errorf("runs of %s = %d, want only %s", w.job, len(runs), w.id)
		}
	}
	// Each is unique on its own: a second grant of either is refused.
	if r := applyAt(t, f, 2, 11, replicated.Command{Op: replicated.OpGrant, Grant: &grants[1]}); !errors.Is(r.Err, jobs.ErrDuplicateRun) {
		t.Errorf("second grant of billing:report: err = %v, want ErrDuplicateRun", r.Err)
	}
	if _, ok := f.spec("billing:report"); !ok {
		t.Error("billing:report is not a job of the set")
	}
}

// An entry of a version before namespaces holds no namespaced job.
func TestFSM_NamespacesNeedTheirVersion(t *testing.T) {
	f := NewFSM()
	s := jobs.Spec{Name: "report", Namespace: "billing", Schedules: []string{"@every 5s"}, Shell: "true"}
	s.Normalize()
	c := replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{s}, Source: "test"}}
	old := replicated.VersionNamespaces - 1
	if res := applyRaw(t, f, 1, 1, rawEntry(t, old, c)); !errors.Is(res.Err, jobs.ErrInvalidConfig) {
		t.Fatalf("version %d entry with a namespaced job: err = %v, want ErrInvalidConfig", old, res.Err)
	}
	if specs, _, _, _ := f.JobSet(); len(specs) != 0 {
		t.Errorf("jobs = %+v, want none", specs)
	}
	if res := applyAt(t, f, 1, 2, c); res.Err != nil {
		t.Errorf("version %d entry: %v", replicated.LogVersion, res.Err)
	}
}

// A snapshot of a state with namespaced jobs and runs restores.
func TestFSM_NamespacesSnapshotRestore(t *testing.T) {
	f := NewFSM()
	s := jobs.Spec{Name: "report", Namespace: "billing", Schedules: []string{"@every 5s"}, Shell: "true"}
	s.Normalize()
	if res := applyAt(t, f, 1, 1, replicated.Command{Op: replicated.OpSetJobs, SetJobs: &replicated.SetJobsCmd{Jobs: []jobs.Spec{s}, Source: "test"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := applyAt(t, f, 2, 10, grant("billing:report", t0)); res.Err != nil {
		t.Fatal(res.Err)
	}
	g := snapshotRestored(t, f)
	if _, ok := g.Run("billing:report@20260701T090005Z"); !ok {
		t.Error("the restored state lacks billing:report's run")
	}
}

// A group named db in each of two namespaces is two groups: with
// max_running 1 each, a run of each holds a place at once.
func TestFSM_GroupsPerNamespace(t *testing.T) {
	var specs []jobs.Spec
	for _, ns := range []string{"", "billing"} {
		for _, n := range []string{"a", "b"} {
			s := jobs.Spec{Name: n, Namespace: ns, Schedules: []string{"@every 5s"}, Shell: "true", Group: "db",
				GroupLimits: &jobs.Group{Name: "db", Namespace: ns, MaxRunning: 1, MaxWaiting: 1}}
			s.Normalize()
			specs = append(specs, s)
		}
	}
	f := withSpecs(t, specs...)
	for i, tc := range []struct {
		job, group string
		waits      bool
	}{
		{"a", "db", false}, {"billing:a", "billing:db", false}, {"b", "db", true}, {"billing:b", "billing:db", true},
	} {
		r := applyAt(t, f, 2, uint64(10+i), grant(tc.job, t0)).Run
		if r.Group != tc.group || jobs.IsWaiting(r) != tc.waits {
			t.Errorf("grant of %s: group %q, waiting %v; want %q, %v", tc.job, r.Group, jobs.IsWaiting(r), tc.group, tc.waits)
		}
	}
}

// after: resolves within the namespace: billing:b follows billing:a,
// and a run of the default namespace's a starts nothing in billing.
func TestFSM_AfterWithinNamespace(t *testing.T) {
	var specs []jobs.Spec
	for _, ns := range []string{"", "billing"} {
		a := jobs.Spec{Name: "a", Namespace: ns, Schedules: []string{"@every 5s"}, Shell: "true"}
		b := jobs.Spec{Name: "b", Namespace: ns, After: []string{"a"}, Shell: "true"}
		specs = append(specs, a, b)
	}
	for i := range specs {
		specs[i].Normalize()
	}
	f := withSpecs(t, specs...)
	ra := applyAt(t, f, 2, 10, grant("a", t0))
	applyAt(t, f, 2, 11, complete(ra.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"b": "w1", "billing:b": "w1"}))
	if _, ok := f.Run(jobs.RunID("b", t0)); !ok {
		t.Error("b has no run after a succeeded")
	}
	if _, ok := f.Run(jobs.RunID("billing:b", t0)); ok {
		t.Error("billing:b ran after the default namespace's a")
	}
	rba := applyAt(t, f, 2, 12, grant("billing:a", t0))
	applyAt(t, f, 2, 13, complete(rba.Run.Attempts[0].ID, jobs.Succeeded, 0, map[string]string{"billing:b": "w1"}))
	r, ok := f.Run(jobs.RunID("billing:b", t0))
	if !ok || len(r.After) != 1 || r.After[0] != jobs.RunID("billing:a", t0) {
		t.Errorf("billing:b after billing:a succeeded: %+v, %v", r, ok)
	}
}

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// Two jobs named report, one in the default namespace and one in
// billing, on a real node: each runs under its own run ids; billing's
// output lands under ns/billing/, the default one's where it always did;
// billing's token publishes under ns/billing/ only, refused for another
// namespace's keys and the default namespace's; the API lists each with
// its namespace, and filters by it.
func TestNamespaces_JobsRunApartAndWriteUnderTheirNamespace(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 1, Profile: "fast", Jobs: `  - name: report
    schedule: "@every 1s"
    shell: 'echo "default $FENCECRON_RUN_ID"'
    output: 'reports/{{ .RunID }}.txt'
  - name: report
    namespace: billing
    schedule: "@every 1s"
    shell: |
      echo "billing $FENCECRON_RUN_ID in $FENCECRON_NAMESPACE"
      echo side | fencecron publish "ns/billing/reports/side-$FENCECRON_SEQ.txt" >/dev/null && echo own-published
      echo x | fencecron publish "ns/sales/x-$FENCECRON_SEQ.txt" >/dev/null 2>&1 || echo other-namespace-refused
      echo x | fencecron publish "reports/x-$FENCECRON_SEQ.txt" >/dev/null 2>&1 || echo default-namespace-refused
    output: 'reports/{{ .RunID }}.txt'
`})
	n := c.Nodes[0]
	succeeded := func(job string) (jobs.Run, error) {
		runs, err := n.Runs(job, 50)
		if err != nil {
			return jobs.Run{}, err
		}
		for _, r := range runs {
			if r.State == jobs.Succeeded {
				return r, nil
			}
		}
		return jobs.Run{}, fmt.Errorf("no succeeded run of %s yet (%d runs)", job, len(runs))
	}
	var def, billing jobs.Run
	proctest.Eventually(t, 60*time.Second, "a succeeded run of each", func() error {
		var err error
		if def, err = succeeded("report"); err != nil {
			return err
		}
		billing, err = succeeded("billing:report")
		return err
	})
	stamp := billing.ScheduledAt.UTC().Format("20060102T150405Z")
	if want := "billing:report@" + stamp; billing.ID != want || billing.Job != "billing:report" {
		t.Errorf("billing's run: id %q job %q, want %q billing:report", billing.ID, billing.Job, want)
	}
	if want := "ns/billing/reports/" + billing.ID + ".txt"; billing.Output != want {
		t.Errorf("billing's output key %q, want %q", billing.Output, want)
	}
	if want := "reports/" + def.ID + ".txt"; def.Output != want || strings.Contains(def.ID, ":") {
		t.Errorf("the default job's run %q, output %q; want a plain id and %q", def.ID, def.Output, want)
	}
	body, _, err := proctest.Get(n.URL() + "/api/v1/store/" + billing.Output)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"billing " + billing.ID + " in billing", "own-published", "other-namespace-refused", "default-namespace-refused"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("%s = %q, want it to say %q", billing.Output, body, want)
		}
	}
	if body, _, err := proctest.Get(n.URL() + "/api/v1/store/" + def.Output); err != nil || !strings.Contains(string(body), "default "+def.ID) {
		t.Errorf("%s = %q, %v", def.Output, body, err)
	}
	// Nothing outside billing's keys was written by its token.
	var keys struct{ Keys []struct{ Key string } }
	if err := proctest.GetJSON(n.URL()+"/api/v1/store?prefix=ns/sales/", &keys); err != nil || len(keys.Keys) != 0 {
		t.Errorf("keys under ns/sales/: %+v, %v; want none", keys.Keys, err)
	}

	// The API shows each job's namespace, and filters by it.
	var list wire.JobList
	if err := proctest.GetJSON(n.URL()+"/api/v1/jobs", &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, j := range list.Jobs {
		got[j.Name] = j.Namespace
	}
	if got["report"] != "default" || got["billing:report"] != "billing" || len(got) != 2 {
		t.Errorf("jobs and their namespaces: %v, want report: default, billing:report: billing", got)
	}
	list = wire.JobList{}
	if err := proctest.GetJSON(n.URL()+"/api/v1/jobs?namespace=billing", &list); err != nil || len(list.Jobs) != 1 || list.Jobs[0].Name != "billing:report" {
		t.Errorf("jobs of namespace billing: %+v, %v", list.Jobs, err)
	}
	out, err := cli(t, "runs", "-addr", n.URL(), "-namespace", "billing", "report")
	if err != nil || !strings.Contains(out, "billing:report@") {
		t.Errorf("runs -namespace billing report: %v\n%s", err, out)
	}
}

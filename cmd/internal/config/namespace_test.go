package config

import (
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

func TestParse_Namespaces(t *testing.T) {
	t.Run("same names in two namespaces", func(t *testing.T) {
		f, err := Parse("ns.yaml", []byte(`groups:
  - {name: db, max_running: 1}
  - {name: db, namespace: billing, max_running: 2}
jobs:
  - {name: extract, schedule: "@every 1s", shell: "true", group: db}
  - {name: report, after: [extract], shell: "true", output: "reports/{{ .RunID }}.txt"}
  - {name: extract, namespace: billing, schedule: "@every 1s", shell: "true", group: db}
  - {name: report, namespace: billing, after: [extract], shell: "true", output: "reports/{{ .RunID }}.txt"}
  - {name: plain, namespace: default, schedule: "@every 1s", shell: "true"}
`))
		if err != nil {
			t.Fatal(err)
		}
		want := []struct{ name, ns, group string }{
			{"extract", "", "db"}, {"report", "", ""}, {"billing:extract", "billing", "billing:db"}, {"billing:report", "billing", ""}, {"plain", "", ""},
		}
		for i, w := range want {
			s := f.Jobs[i]
			if s.Name != w.name || s.Namespace != w.ns || s.Group != w.group {
				t.Errorf("job %d: name %q namespace %q group %q, want %q %q %q", i, s.Name, s.Namespace, s.Group, w.name, w.ns, w.group)
			}
		}
		if g := f.Jobs[2].GroupLimits; g == nil || g.MaxRunning != 2 || g.Name != "billing:db" {
			t.Errorf("billing:extract's limits = %+v, want billing's db (max_running 2)", g)
		}
		if got := f.Jobs[3].After; len(got) != 1 || got[0] != "billing:extract" {
			t.Errorf("billing:report's after = %q, want [billing:extract]", got)
		}
		if err := jobs.CheckSet(f.Jobs, jobs.Limits{MaxBodyBytes: jobs.DefaultMaxOutputBytes}, nil); err != nil {
			t.Errorf("CheckSet = %v", err)
		}
	})
	t.Run("problems at their lines", func(t *testing.T) {
		_, err := Parse("ns.yaml", []byte(`groups:
  - {name: db, max_running: 1}
jobs:
  - {name: extract, schedule: "@every 1s", shell: "true"}
  - {name: extract, namespace: billing, schedule: "@every 1s", shell: "true"}
  - {name: extract, namespace: billing, schedule: "@every 1s", shell: "true"}
  - name: report
    namespace: billing
    shell: "true"
    after:
      - extract
      - sales:extract
  - {name: load, namespace: billing, after: [default:extract], shell: "true"}
  - {name: x, namespace: billing, schedule: "@every 1s", shell: "true", group: db}
  - {name: y, namespace: Bad/NS, schedule: "@every 1s", shell: "true"}
  - {name: z, schedule: "@every 1s", shell: "true", output: "ns/billing/z.txt"}
`))
		if err == nil {
			t.Fatal("no error")
		}
		for _, want := range []string{
			`ns.yaml:6:12: jobs[2].name: "extract" is already the name of the job on line 5 in namespace billing`,
			`ns.yaml:12:9: jobs[3].after[1]: "sales:extract" is in namespace sales, not this job's (billing)`,
			`ns.yaml:13:46: jobs[4].after[0]: "default:extract" is in namespace default, not this job's (billing)`,
			`ns.yaml:14:80: jobs[5].group: "db" is not defined in namespace billing`,
			`ns.yaml:15:26: jobs[6].namespace: "Bad/NS": want a DNS label`,
			`ns.yaml:16:61: jobs[7].output: renders "ns/billing/z.txt", a key of namespace "billing"`,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
		if strings.Count(err.Error(), "sales:extract") != 1 {
			t.Errorf("the cross-namespace reference is reported %d times, want once:\n%v", strings.Count(err.Error(), "sales:extract"), err)
		}
	})
}

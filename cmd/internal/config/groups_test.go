package config

import (
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

func TestParse_Groups(t *testing.T) {
	t.Run("limits reach the jobs", func(t *testing.T) {
		f, err := Parse("g.yaml", []byte(`groups:
  - {name: db, max_running: 2}
jobs:
  - {name: a, schedule: "@every 1s", shell: "true", group: db}
  - {name: b, schedule: "@every 1s", shell: "true"}
`))
		if err != nil {
			t.Fatal(err)
		}
		want := jobs.Group{Name: "db", MaxRunning: 2, MaxWaiting: jobs.DefaultGroupMaxWaiting}
		if len(f.Groups) != 1 || f.Groups[0] != want {
			t.Errorf("groups = %+v, want %+v", f.Groups, want)
		}
		if g := f.Jobs[0].GroupLimits; g == nil || *g != want {
			t.Errorf("job a's limits = %v, want %+v", g, want)
		}
		if f.Jobs[1].GroupLimits != nil {
			t.Errorf("job b got limits %+v", f.Jobs[1].GroupLimits)
		}
	})
	t.Run("problems at their lines", func(t *testing.T) {
		_, err := Parse("g.yaml", []byte(`groups:
  - {name: db, max_running: 1, max_waiting: 0}
  - {name: db, max_running: 1}
  - {name: io, max_running: 0}
  - {name: cpu, max_running: 1, max_waiting: -1}
jobs:
  - {name: a, schedule: "@every 1s", shell: "true", group: nope}
`))
		if err == nil {
			t.Fatal("no error")
		}
		for _, want := range []string{
			`g.yaml:3:12: groups[1].name: "db" is already the name of groups[0]`,
			`g.yaml:4:29: groups[2].max_running: 0: want at least 1`,
			`g.yaml:5:46: groups[3].max_waiting: -1: want 0`,
			`g.yaml:7:60: jobs[0].group: "nope" is not defined`,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	})
}

func TestCheckSet_GroupLimitsAgree(t *testing.T) {
	a := jobs.Spec{Name: "a", Schedules: []string{"@every 1s"}, Shell: "true", Group: "db", GroupLimits: &jobs.Group{Name: "db", MaxRunning: 1}}
	b := a
	b.Name, b.GroupLimits = "b", &jobs.Group{Name: "db", MaxRunning: 2}
	if err := jobs.CheckSet([]jobs.Spec{a, b}, jobs.Limits{}, nil); err == nil || !strings.Contains(err.Error(), "carry different limits") {
		t.Errorf("CheckSet = %v; want different limits refused", err)
	}
	c := a
	c.Name, c.GroupLimits = "c", nil
	if err := jobs.CheckSet([]jobs.Spec{a, c}, jobs.Limits{}, nil); err == nil || !strings.Contains(err.Error(), `"db" is not defined`) {
		t.Errorf("CheckSet = %v; want a group without limits refused", err)
	}
}

package jobs_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

func TestQualifiedName(t *testing.T) {
	cases := []struct{ ns, name, want string }{
		{"", "report", "report"},
		{"default", "report", "report"},
		{"billing", "report", "billing:report"},
	}
	for _, tc := range cases {
		if got := jobs.QualifiedName(tc.ns, tc.name); got != tc.want {
			t.Errorf("QualifiedName(%q, %q) = %q, want %q", tc.ns, tc.name, got, tc.want)
		}
		ns, name := jobs.SplitQualified(tc.want)
		wantNS := tc.ns
		if wantNS == "" {
			wantNS = jobs.DefaultNamespace
		}
		if ns != wantNS || name != tc.name {
			t.Errorf("SplitQualified(%q) = %q, %q, want %q, %q", tc.want, ns, name, wantNS, tc.name)
		}
	}
}

func TestValidNamespace(t *testing.T) {
	for ns, want := range map[string]bool{
		"billing": true, "team-2": true, "default": true, "a": true,
		"": false, "Billing": false, "a:b": false, "a/b": false, "-a": false, "a-": false,
		strings.Repeat("a", jobs.MaxNamespaceLen): true, strings.Repeat("a", jobs.MaxNamespaceLen+1): false,
	} {
		if got := jobs.ValidNamespace(ns); got != want {
			t.Errorf("ValidNamespace(%q) = %v, want %v", ns, got, want)
		}
	}
}

// Normalize names a namespaced job, what it follows and its group by
// qualified names, leaves a default job as it was, and is idempotent.
func TestSpec_NormalizeNamespace(t *testing.T) {
	cases := []struct {
		name           string
		in             jobs.Spec
		wantName, ns   string
		wantAfter      []string
		wantGroup      string
		wantGroupLimit string
	}{
		{"default", jobs.Spec{Name: "report", After: []string{"extract"}, Group: "g", GroupLimits: &jobs.Group{Name: "g", MaxRunning: 1}},
			"report", "", []string{"extract"}, "g", "g"},
		{"default spelled out", jobs.Spec{Name: "report", Namespace: "default", After: []string{"default:extract"}},
			"report", "", []string{"extract"}, "", ""},
		{"namespaced", jobs.Spec{Name: "report", Namespace: "billing", After: []string{"extract", "billing:load"}, Group: "g", GroupLimits: &jobs.Group{Name: "g", Namespace: "billing", MaxRunning: 1}},
			"billing:report", "billing", []string{"billing:extract", "billing:load"}, "billing:g", "billing:g"},
		{"qualified name alone", jobs.Spec{Name: "billing:report"},
			"billing:report", "billing", nil, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.in
			s.Normalize()
			if s.Name != tc.wantName || s.Namespace != tc.ns {
				t.Errorf("name, namespace = %q, %q, want %q, %q", s.Name, s.Namespace, tc.wantName, tc.ns)
			}
			if !reflect.DeepEqual(s.After, tc.wantAfter) {
				t.Errorf("after = %q, want %q", s.After, tc.wantAfter)
			}
			if s.Group != tc.wantGroup {
				t.Errorf("group = %q, want %q", s.Group, tc.wantGroup)
			}
			if s.GroupLimits != nil && s.GroupLimits.Name != tc.wantGroupLimit {
				t.Errorf("group limits' name = %q, want %q", s.GroupLimits.Name, tc.wantGroupLimit)
			}
			again := s
			again.After = append([]string(nil), s.After...)
			again.Normalize()
			if !reflect.DeepEqual(again, s) {
				t.Errorf("a second Normalize changed the spec:\n%+v\n%+v", again, s)
			}
		})
	}
}

// A namespaced job's run ids, output keys and token scope carry its
// namespace; a default job's are what they always were.
func TestSpec_NamespaceKeys(t *testing.T) {
	at := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		ns, output                string
		wantRunID, wantKey, scope string
	}{
		{"", `reports/{{ .Scheduled.Format "2006-01" }}.csv`, "report@20260701T090000Z", "reports/2026-07.csv", "reports/"},
		{"default", `reports/{{ .Scheduled.Format "2006-01" }}.csv`, "report@20260701T090000Z", "reports/2026-07.csv", "reports/"},
		{"billing", `reports/{{ .Scheduled.Format "2006-01" }}.csv`, "billing:report@20260701T090000Z", "ns/billing/reports/2026-07.csv", "ns/billing/reports/"},
		{"billing", `{{ .Job }}/{{ .RunID }}.txt`, "billing:report@20260701T090000Z", "ns/billing/report/billing:report@20260701T090000Z.txt", "ns/billing/report/"},
		{"billing", ``, "billing:report@20260701T090000Z", "", "ns/billing/report/"},
	}
	for _, tc := range cases {
		s := jobs.Spec{Name: "report", Namespace: tc.ns, Output: tc.output}
		s.Normalize()
		if got := jobs.RunID(s.Name, at); got != tc.wantRunID {
			t.Errorf("%s %q: run id %q, want %q", tc.ns, tc.output, got, tc.wantRunID)
		}
		key, err := s.OutputKey(at)
		if err != nil || key != tc.wantKey {
			t.Errorf("%s %q: OutputKey = %q, %v, want %q", tc.ns, tc.output, key, err, tc.wantKey)
		}
		if got := s.OutputPrefix(); got != tc.scope {
			t.Errorf("%s %q: OutputPrefix = %q, want %q", tc.ns, tc.output, got, tc.scope)
		}
		if key != "" && s.OutputOutsideScope(key) {
			t.Errorf("%s %q: key %q outside scope %q", tc.ns, tc.output, key, s.OutputPrefix())
		}
	}
}

func TestSpec_ValidateNamespace(t *testing.T) {
	cases := []struct {
		name string
		edit func(*jobs.Spec)
		want string // "" for valid
	}{
		{"namespaced", func(s *jobs.Spec) { s.Namespace = "billing" }, ""},
		{"qualified", func(s *jobs.Spec) { s.Name = "billing:monthly-report" }, ""},
		{"bad namespace", func(s *jobs.Spec) { s.Namespace = "Billing/x" }, "namespace: \"Billing/x\": want a DNS label"},
		{"name disagrees", func(s *jobs.Spec) { s.Namespace, s.Name = "billing", "sales:monthly-report" }, `qualified with namespace "sales", but namespace is "billing"`},
		{"after across namespaces", func(s *jobs.Spec) {
			s.Namespace, s.Schedules, s.After = "billing", nil, []string{"sales:extract"}
		}, `after[0]: "sales:extract" is in namespace sales, not this job's (billing)`},
		{"after into default", func(s *jobs.Spec) {
			s.Namespace, s.Schedules, s.After = "billing", nil, []string{"default:extract"}
		}, `is in namespace default, not this job's (billing)`},
		{"group across namespaces", func(s *jobs.Spec) {
			s.Namespace, s.Group, s.GroupLimits = "billing", "sales:g", &jobs.Group{Name: "g", Namespace: "sales", MaxRunning: 1}
		}, `group: "sales:g" is in namespace sales`},
		{"default job writing under ns/", func(s *jobs.Spec) { s.Output = "ns/billing/x.csv" }, `a key of namespace "billing"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.edit(&s)
			err := s.Validate(jobs.Limits{MaxBodyBytes: jobs.DefaultMaxOutputBytes})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want it to mention %q", err, tc.want)
			}
			// Valid before Normalize if and only if after.
			n := s
			n.Normalize()
			if nerr := n.Validate(jobs.Limits{MaxBodyBytes: jobs.DefaultMaxOutputBytes}); (nerr == nil) != (err == nil) {
				t.Errorf("after Normalize: Validate = %v, before: %v", nerr, err)
			}
		})
	}
}

// Two jobs of one name in two namespaces are one set; after resolves
// within the follower's namespace.
func TestCheckSet_Namespaces(t *testing.T) {
	l := jobs.Limits{MaxBodyBytes: jobs.DefaultMaxOutputBytes}
	a, b := validSpec(), validSpec()
	b.Namespace = "billing"
	follow := jobs.Spec{Name: "after-report", Namespace: "billing", After: []string{"monthly-report"}, Command: []string{"true"}}
	set := []jobs.Spec{a, b, follow}
	for i := range set {
		set[i].Normalize()
	}
	if err := jobs.CheckSet(set, l, nil); err != nil {
		t.Fatalf("CheckSet = %v", err)
	}
	if got, want := set[2].After, []string{"billing:monthly-report"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after = %q, want %q", got, want)
	}
	// Without the namespace's own job, the default one's does not count.
	set = []jobs.Spec{a, set[2]}
	ps := jobs.CheckAfter(set)
	if len(ps) != 1 || !strings.Contains(ps[0].Msg, "not a job of namespace billing") {
		t.Errorf("CheckAfter = %+v, want one problem: not a job of namespace billing", ps)
	}
}

func TestValidQualifiedName(t *testing.T) {
	for q, want := range map[string]bool{
		"report": true, "billing:report": true,
		"default:report": false, ":report": false, "billing:": false, "a:b:c": false, "Billing:report": false, "billing:Report": false,
	} {
		if got := jobs.ValidQualifiedName(q); got != want {
			t.Errorf("ValidQualifiedName(%q) = %v, want %v", q, got, want)
		}
	}
}

// Normalize leaves the after list it was given alone: a copy of a spec
// shares it with the original.
func TestSpec_NormalizeCopiesAfter(t *testing.T) {
	orig := jobs.Spec{Name: "mail", Namespace: "billing", After: []string{"report"}}
	c := orig
	c.Normalize()
	if orig.After[0] != "report" || c.After[0] != "billing:report" {
		t.Errorf("after: original %q, normalized copy %q", orig.After, c.After)
	}
}

package jobs

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSpec_OutputPrefix(t *testing.T) {
	cases := []struct {
		output, want string
		outside      bool // the rendered key is outside the scope
	}{
		{`reports/{{ .Scheduled.Format "2006-01" }}.csv`, "reports/", false},
		{`reports/monthly/{{ .Job }}-{{ .RunID }}.csv`, "reports/monthly/", false},
		{`reports/x-{{ .Job }}/out.csv`, "reports/", false},
		{`reports/monthly.csv`, "reports/", false},
		// No literal directory: the job's own directory, never "".
		{`{{ .Job }}/out.csv`, "j/", false},
		{`{{ .Job }}-{{ .RunID }}.txt`, "j/", true},
		{`out.csv`, "j/", true},
		{``, "j/", false},
	}
	for _, tc := range cases {
		s := Spec{Name: "j", Output: tc.output}
		got := s.OutputPrefix()
		if got != tc.want {
			t.Errorf("OutputPrefix(%q) = %q, want %q", tc.output, got, tc.want)
		}
		if got == "" || !strings.HasSuffix(got, "/") {
			t.Errorf("OutputPrefix(%q) = %q: want a directory prefix, never empty", tc.output, got)
		}
		key, err := s.OutputKey(time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatalf("OutputKey(%q): %v", tc.output, err)
		}
		if outside := s.OutputOutsideScope(key); outside != tc.outside {
			t.Errorf("key %q rendered from %q: outside scope %q = %v, want %v", key, tc.output, got, outside, tc.outside)
		}
	}
}

func TestScopeOverlaps(t *testing.T) {
	job := func(name, output string) Spec { return Spec{Name: name, Output: output} }
	cases := []struct {
		name  string
		specs []Spec
		want  []ScopeOverlap
	}{
		{"disjoint", []Spec{job("a", "reports/{{ .RunID }}"), job("b", "logs/{{ .RunID }}"), job("c", "")}, nil},
		{"a sibling that shares letters", []Spec{job("a", "rep/{{ .RunID }}"), job("b", "reports/{{ .RunID }}")}, nil},
		{"equal", []Spec{job("b", "reports/{{ .RunID }}.csv"), job("a", "reports/{{ .RunID }}.json")},
			[]ScopeOverlap{{Outer: "b", Inner: "a", OuterPrefix: "reports/", InnerPrefix: "reports/"}}},
		{"nested either way", []Spec{job("monthly", "reports/monthly/{{ .RunID }}"), job("all", "reports/{{ .RunID }}")},
			[]ScopeOverlap{{Outer: "all", Inner: "monthly", OuterPrefix: "reports/", InnerPrefix: "reports/monthly/"}}},
		{"a job's own directory under another's scope", []Spec{job("reports", ""), job("x", "reports/{{ .RunID }}")},
			[]ScopeOverlap{{Outer: "reports", Inner: "x", OuterPrefix: "reports/", InnerPrefix: "reports/"}}},
		{"three", []Spec{job("c", "r/a/b/{{ .RunID }}"), job("b", "r/a/{{ .RunID }}"), job("a", "r/{{ .RunID }}")},
			[]ScopeOverlap{
				{Outer: "a", Inner: "b", OuterPrefix: "r/", InnerPrefix: "r/a/"},
				{Outer: "a", Inner: "c", OuterPrefix: "r/", InnerPrefix: "r/a/b/"},
				{Outer: "b", Inner: "c", OuterPrefix: "r/a/", InnerPrefix: "r/a/b/"},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ScopeOverlaps(tc.specs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ScopeOverlaps = %+v, want %+v", got, tc.want)
			}
		})
	}
}

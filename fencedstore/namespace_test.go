package fencedstore_test

import (
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
)

func TestJobNamespace(t *testing.T) {
	for job, want := range map[string]string{
		"report":         "default",
		"":               "default",
		"billing:report": "billing",
		":report":        "default",
		"a:b:c":          "a",
	} {
		if got := fencedstore.JobNamespace(job); got != want {
			t.Errorf("JobNamespace(%q) = %q, want %q", job, got, want)
		}
	}
}

func TestNamespacePrefix(t *testing.T) {
	for ns, want := range map[string]string{"": "", "default": "", "billing": "ns/billing/"} {
		if got := fencedstore.NamespacePrefix(ns); got != want {
			t.Errorf("NamespacePrefix(%q) = %q, want %q", ns, got, want)
		}
	}
}

func TestKeyNamespace(t *testing.T) {
	for key, want := range map[string]string{
		"reports/a.csv":          "default",
		"nsx/a":                  "default",
		"ns":                     "default",
		"ns/billing/reports/a":   "billing",
		"ns/billing":             "billing",
		"ns/billing-2/x":         "billing-2",
		"reports/ns/billing/a":   "default",
		"ns/default/reports/a":   "default",
		"ns/billing/ns/other/x2": "billing",
	} {
		if got := fencedstore.KeyNamespace(key); got != want {
			t.Errorf("KeyNamespace(%q) = %q, want %q", key, got, want)
		}
	}
}

// A token's scope never crosses into another namespace's keys, whatever
// its prefix says.
func TestScope_CoversNamespaces(t *testing.T) {
	cases := []struct {
		job, prefix, key string
		want             bool
	}{
		{"report", "reports/", "reports/a.csv", true},
		{"billing:report", "ns/billing/reports/", "ns/billing/reports/a.csv", true},
		{"billing:report", "ns/billing/reports/a.csv", "ns/billing/reports/a.csv", true},
		// Another namespace's keys, or the default namespace's.
		{"billing:report", "ns/billing/reports/", "ns/sales/reports/a.csv", false},
		{"billing:report", "ns/", "ns/sales/reports/a.csv", false},
		{"billing:report", "reports/", "reports/a.csv", false},
		// A default job's prefix that reaches into ns/ writes nothing there.
		{"report", "ns/", "ns/billing/reports/a.csv", false},
		{"report", "ns/billing/", "ns/billing/a", false},
		{"ns", "ns/", "ns/billing/a", false},
	}
	for _, tc := range cases {
		s := fencedstore.Scope{Job: tc.job, Prefix: tc.prefix}
		if got := s.Covers(tc.key); got != tc.want {
			t.Errorf("scope {%s %s} covers %q = %v, want %v", tc.job, tc.prefix, tc.key, got, tc.want)
		}
	}
}

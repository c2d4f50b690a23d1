package jobs

import (
	"strings"
	"testing"
	"time"
)

func TestSpec_OutputPrefix(t *testing.T) {
	cases := []struct{ output, want string }{
		{`reports/{{ .Scheduled.Format "2006-01" }}.csv`, "reports/"},
		{`reports/monthly/{{ .Job }}-{{ .RunID }}.csv`, "reports/monthly/"},
		{`reports/x-{{ .Job }}/out.csv`, "reports/"},
		{`reports/monthly.csv`, "reports/"},
		{`{{ .Job }}/out.csv`, ""},
		{`out.csv`, ""},
		{``, ""},
	}
	for _, tc := range cases {
		s := Spec{Name: "j", Output: tc.output}
		if got := s.OutputPrefix(); got != tc.want {
			t.Errorf("OutputPrefix(%q) = %q, want %q", tc.output, got, tc.want)
		}
		// Every rendered key lies inside the prefix.
		key, err := s.OutputKey(time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatalf("OutputKey(%q): %v", tc.output, err)
		}
		if !strings.HasPrefix(key, tc.want) {
			t.Errorf("key %q rendered from %q is outside prefix %q", key, tc.output, tc.want)
		}
	}
}

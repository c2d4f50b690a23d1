package jobs_test

import (
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90s", 90 * time.Second, true},
		{"30d", 30 * 24 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"0d", 0, true},
		{"d", 0, false},
		{"1.5d", 0, false},
		{"-1d", 0, false},
		{"1d-1h", 0, false},
		{"1dx", 0, false},
		{"99999999999d", 0, false},
		{"90", 0, false},
	} {
		got, err := jobs.ParseDuration(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

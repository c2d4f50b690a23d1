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

// A run's duration as the dashboard and `fencecron runs` show it: a
// process that ended within half a millisecond of its exec still shows
// a time, not "0s".
func TestShowDuration(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{0, ""},
		{-time.Second, ""},
		{412345 * time.Nanosecond, "412µs"},
		{1499 * time.Microsecond, "1ms"},
		{999400 * time.Microsecond, "999ms"},
		{1234567 * time.Microsecond, "1.23s"},
		{90 * time.Second, "1m30s"},
	} {
		if got := jobs.ShowDuration(c.in); got != c.want {
			t.Errorf("ShowDuration(%s) = %q, want %q", c.in, got, c.want)
		}
	}
}

package jobs_test

import (
	"encoding/json"
	"math"
	"strings"
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

// A Duration is written in JSON as its Go string, quoted as it is, and
// read back to the same value: specs in logs, snapshots and digests hold
// these bytes, so they must not change.
func TestDuration_JSON(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		json string
	}{
		{0, `"0s"`},
		{90 * time.Second, `"1m30s"`},
		{1500 * time.Nanosecond, `"1.5µs"`},
		{math.MinInt64, `"-2562047h47m16.854775808s"`},
	} {
		b, err := json.Marshal(jobs.Duration(c.d))
		if err != nil || string(b) != c.json {
			t.Errorf("Marshal(%v) = %s, %v; want %s", c.d, b, err, c.json)
		}
		var back jobs.Duration
		if err := json.Unmarshal(b, &back); err != nil || back.D() != c.d {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", b, back.D(), err, c.d)
		}
	}
	// In a spec: every duration field, and jitter left out when zero.
	s := jobs.Spec{Name: "a", Timeout: jobs.Duration(time.Minute), LeaseTTL: jobs.Duration(5 * time.Second), Backoff: jobs.Duration(time.Millisecond), CatchupWindow: jobs.Duration(time.Hour), History: jobs.History{MaxAge: jobs.Duration(48 * time.Hour)}}
	b, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"timeout":"1m0s"`, `"lease_ttl":"5s"`, `"backoff":"1ms"`, `"catchup_window":"1h0m0s"`, `"history":{"max_age":"48h0m0s"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	if strings.Contains(string(b), "jitter") {
		t.Errorf("%s has a zero jitter", b)
	}
	// The set's hash and the job's digest, as every release since
	// durations were first encoded this way computed them: a changed byte
	// would make a mixed-version cluster disagree about both.
	s.Jitter = jobs.Duration(1500 * time.Nanosecond)
	if hash, digests := jobs.HashSpecs([]jobs.Spec{s}), jobs.SpecDigests([]jobs.Spec{s}); hash != "66cc1fdf0b577778" || digests[0] != "843b9358af486e0b" {
		t.Errorf("hash %s, digest %s; want 66cc1fdf0b577778 and 843b9358af486e0b", hash, digests[0])
	}
}

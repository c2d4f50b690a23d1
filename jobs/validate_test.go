package jobs_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

func validSpec() jobs.Spec {
	return jobs.Spec{
		Name:      "monthly-report",
		Schedules: []string{"0 0 9 1 * *"},
		Timezone:  "Europe/Berlin",
		Command:   []string{"/usr/local/bin/build-report"},
		Output:    `reports/{{ .Scheduled.Format "2006-01" }}.csv`,
	}
}

func TestSpec_Validate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*jobs.Spec)
		limits jobs.Limits
		want   []string // FieldError strings, in order
	}{
		{"valid", func(s *jobs.Spec) {}, jobs.Limits{MaxBodyBytes: jobs.DefaultMaxOutputBytes}, nil},
		{"valid shell with everything set", func(s *jobs.Spec) {
			s.Command, s.Shell = nil, "echo hi"
			s.Env = map[string]string{"A_1": "x"}
			s.Dir, s.Timeout, s.LeaseTTL, s.Retries, s.Backoff = "/tmp", jobs.Duration(time.Minute), jobs.Duration(time.Second), 3, jobs.Duration(time.Second)
			s.Overlap, s.Misfire, s.CatchupWindow = jobs.OverlapReplace, jobs.MisfireAll, jobs.Duration(time.Hour)
			s.Target, s.MaxOutputBytes, s.Jitter = map[string]string{"zone": "a"}, 10, jobs.Duration(time.Minute)
			s.DST = jobs.DSTPolicy{Spring: jobs.SpringSkip, Fall: jobs.FallTwice}
		}, jobs.Limits{}, nil},
		{"missing name", func(s *jobs.Spec) { s.Name = "" }, jobs.Limits{}, []string{"name: required"}},
		{"name with capitals", func(s *jobs.Spec) { s.Name = "Report" }, jobs.Limits{}, []string{`name: "Report" is not a DNS label`}},
		{"name with trailing dash", func(s *jobs.Spec) { s.Name = "report-" }, jobs.Limits{}, []string{`name: "report-" is not a DNS label`}},
		{"name too long", func(s *jobs.Spec) { s.Name = strings.Repeat("a", 64) }, jobs.Limits{}, []string{"name: "}},
		{"no schedule", func(s *jobs.Spec) { s.Schedules = nil }, jobs.Limits{}, []string{"schedule: required"}},
		{"second schedule bad", func(s *jobs.Spec) { s.Schedules = []string{"@daily", "* *"} }, jobs.Limits{}, []string{`schedules[1]: "* *": want 5 fields`}},
		{"bad zone", func(s *jobs.Spec) { s.Timezone = "Europe/Atlantis" }, jobs.Limits{}, []string{`timezone: unknown time zone "Europe/Atlantis"`}},
		{"bad dst", func(s *jobs.Spec) { s.DST = jobs.DSTPolicy{Spring: "jump", Fall: "never"} }, jobs.Limits{}, []string{`dst.spring: "jump": want shift or skip`, `dst.fall: "never": want once or twice`}},
		{"no command", func(s *jobs.Spec) { s.Command = nil }, jobs.Limits{}, []string{"command: required"}},
		{"command and shell", func(s *jobs.Spec) { s.Shell = "true" }, jobs.Limits{}, []string{"shell: give command or shell, not both"}},
		{"empty program", func(s *jobs.Spec) { s.Command = []string{" ", "x"} }, jobs.Limits{}, []string{"command[0]: the program is empty"}},
		{"env names", func(s *jobs.Spec) { s.Env = map[string]string{"1X": "", "FENCECRON_TOKEN": "forged"} }, jobs.Limits{}, []string{
			`env: "1X" is not a variable name`, `env: "FENCECRON_TOKEN": names starting with FENCECRON_ are reserved`}},
		{"relative dir", func(s *jobs.Spec) { s.Dir = "work" }, jobs.Limits{}, []string{`dir: "work": want an absolute path`}},
		{"output does not parse", func(s *jobs.Spec) { s.Output = "reports/{{ .Scheduled" }, jobs.Limits{}, []string{"output: output template:"}},
		{"output names an unknown field", func(s *jobs.Spec) { s.Output = "reports/{{ .When }}" }, jobs.Limits{}, []string{"output: output template:"}},
		{"output renders empty", func(s *jobs.Spec) { s.Output = `{{ if false }}x{{ end }}` }, jobs.Limits{}, []string{"renders an empty key"}},
		// The store's own key rule (fencedstore.CheckKey), on the rendered key.
		{"output renders an absolute key", func(s *jobs.Spec) { s.Output = "/reports/{{ .Job }}" }, jobs.Limits{}, []string{
			`output: renders "/reports/monthly-report", not a valid store key: absolute path`}},
		{"output renders a dot-dot segment", func(s *jobs.Spec) { s.Output = "../../etc/x" }, jobs.Limits{}, []string{
			`output: renders "../../etc/x", not a valid store key: ".." segment`}},
		{"output renders an empty segment", func(s *jobs.Spec) { s.Output = `reports//{{ .Scheduled.Format "2006" }}` }, jobs.Limits{}, []string{
			"output: renders \"reports//2026\", not a valid store key: empty path segment"}},
		// A wrong zone does not hide a wrong key: the key is checked in UTC.
		{"bad zone and bad key", func(s *jobs.Spec) { s.Timezone, s.Output = "Mars/Olympus", "/x" }, jobs.Limits{}, []string{
			"timezone:", `output: renders "/x"`}},
		{"negative durations", func(s *jobs.Spec) {
			s.Timeout, s.Backoff, s.CatchupWindow, s.Jitter = -1, -1, -1, -1
		}, jobs.Limits{}, []string{"timeout: -1ns: must not be negative", "backoff:", "catchup_window:", "jitter:"}},
		{"short lease", func(s *jobs.Spec) { s.LeaseTTL = jobs.Duration(time.Millisecond) }, jobs.Limits{}, []string{"lease_ttl: 1ms: want at least 1s"}},
		{"retries", func(s *jobs.Spec) { s.Retries = 101 }, jobs.Limits{}, []string{"retries: 101: want 0 to 100"}},
		{"max output", func(s *jobs.Spec) { s.MaxOutputBytes = -5 }, jobs.Limits{}, []string{"max_output_bytes: -5"}},
		// The store's body cap: explicit values, and the default when the
		// job leaves the field out.
		{"max output within the store's cap", func(s *jobs.Spec) { s.MaxOutputBytes = 1 << 20 }, jobs.Limits{MaxBodyBytes: 1 << 20}, nil},
		{"max output above the store's cap", func(s *jobs.Spec) { s.MaxOutputBytes = 1<<20 + 1 }, jobs.Limits{MaxBodyBytes: 1 << 20}, []string{
			"max_output_bytes: 1048577 is more than store.max_body_bytes (1048576)"}},
		{"default max output above the store's cap", func(s *jobs.Spec) {}, jobs.Limits{MaxBodyBytes: 1 << 20}, []string{
			"max_output_bytes: the default, 16777216, is more than store.max_body_bytes (1048576)"}},
		{"default max output, normalized, above the store's cap", func(s *jobs.Spec) { s.Normalize() }, jobs.Limits{MaxBodyBytes: 1 << 20}, []string{
			"max_output_bytes: 16777216 is more than store.max_body_bytes (1048576)"}},
		{"default max output within the default cap", func(s *jobs.Spec) { s.Normalize() }, jobs.Limits{MaxBodyBytes: jobs.DefaultMaxOutputBytes}, nil},
		{"no cap known", func(s *jobs.Spec) { s.MaxOutputBytes = 1 << 40 }, jobs.Limits{}, nil},
		{"enums", func(s *jobs.Spec) { s.Overlap, s.Misfire = "queue", "never" }, jobs.Limits{}, []string{`overlap: "queue"`, `misfire: "never"`}},
		{"empty target tag", func(s *jobs.Spec) { s.Target = map[string]string{"": "a"} }, jobs.Limits{}, []string{"target: empty tag name"}},
		{"jitter longer than the interval", func(s *jobs.Spec) {
			s.Schedules, s.Jitter = []string{"@every 1m"}, jobs.Duration(time.Minute)
		}, jobs.Limits{}, []string{"jitter: 1m0s: want less than the shortest interval between fire times (1m0s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.modify(&s)
			err := s.Validate(tt.limits)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var se *jobs.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("Validate() = %v, want a *SpecError", err)
			}
			if !errors.Is(err, jobs.ErrInvalidConfig) {
				t.Error("SpecError does not wrap ErrInvalidConfig")
			}
			if got, want := len(se.Problems), len(tt.want); got != want {
				t.Fatalf("%d problems, want %d: %v", got, want, err)
			}
			for i, p := range se.Problems {
				if !strings.HasPrefix(p.Error(), tt.want[i]) && !strings.Contains(p.Error(), tt.want[i]) {
					t.Errorf("problem %d = %q, want it to start with %q", i, p.Error(), tt.want[i])
				}
			}
		})
	}
}

func TestSpec_JitterFor(t *testing.T) {
	s := validSpec()
	at := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	if got := s.JitterFor(at); got != 0 {
		t.Errorf("no jitter configured, got %s", got)
	}
	s.Jitter = jobs.Duration(10 * time.Minute)
	first := s.JitterFor(at)
	if got := s.JitterFor(at.In(time.FixedZone("X", 3600))); got != first {
		t.Errorf("jitter depends on the zone the time is expressed in: %s vs %s", got, first)
	}
	// Pinned, computed outside Go:
	//   printf monthly-report@20260701T090000Z | sha256sum  -> first 16 hex
	//   digits as an integer, mod 600000 (ms) = 156051.
	if got, want := first, 2*time.Minute+36*time.Second+51*time.Millisecond; got != want {
		t.Errorf("JitterFor = %s, want %s (the derivation changed)", got, want)
	}
	seen := map[time.Duration]bool{}
	for i := range 200 {
		d := s.JitterFor(at.Add(time.Duration(i) * time.Hour))
		if d < 0 || d >= s.Jitter.D() || d%time.Millisecond != 0 {
			t.Fatalf("jitter %s out of [0, %s) or not whole milliseconds", d, s.Jitter)
		}
		seen[d] = true
	}
	if len(seen) < 150 {
		t.Errorf("only %d distinct jitters over 200 runs", len(seen))
	}
	other := validSpec()
	other.Name, other.Jitter = "other", s.Jitter
	if other.JitterFor(at) == first {
		t.Error("two jobs got the same jitter for the same time")
	}
}

func TestSpec_RetryDelay(t *testing.T) {
	s := validSpec()
	s.Backoff = jobs.Duration(10 * time.Second)
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 9: 2560 * time.Second, 10: time.Hour, 1000: time.Hour} {
		if got := s.RetryDelay(n); got != want {
			t.Errorf("RetryDelay(%d) = %s, want %s", n, got, want)
		}
	}
}

// One rule for store keys, which the store (fencedstore.ValidateKey) and
// job validation both apply.
func TestCheckKey(t *testing.T) {
	tests := []struct{ key, want string }{
		{"reports/2026-07.csv", ""},
		{"ü/ö.csv", ""},
		{strings.Repeat("k", fencedstore.MaxKeyLen), ""},
		{"", "empty key"},
		{strings.Repeat("k", fencedstore.MaxKeyLen+1), "longer than 1024 bytes"},
		{"a\xffb", "not valid UTF-8"},
		{"/etc/passwd", "absolute path"},
		{"a\tb", "control character"},
		{"a\x7fb", "control character"},
		{"a//b", "empty path segment"},
		{"a/", "empty path segment"},
		{"a/./b", `"." segment`},
		{"../x", `".." segment`},
	}
	for _, tt := range tests {
		err := fencedstore.CheckKey(tt.key)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("fencedstore.CheckKey(%q) = %v, want nil", tt.key, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("fencedstore.CheckKey(%q) = %v, want %q", tt.key, err, tt.want)
		}
	}
}

// A job set: every spec against the limits, and unique names.
func TestCheckSet(t *testing.T) {
	a, b := validSpec(), validSpec()
	b.Name = "other"
	if err := jobs.CheckSet([]jobs.Spec{a, b}, jobs.Limits{MaxBodyBytes: jobs.DefaultMaxOutputBytes}, nil); err != nil {
		t.Fatalf("CheckSet(valid) = %v", err)
	}
	b.Name, b.Output = a.Name, "../../etc/x"
	err := jobs.CheckSet([]jobs.Spec{a, b}, jobs.Limits{MaxBodyBytes: 1 << 20}, nil)
	if !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Fatalf("CheckSet = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{
		"job monthly-report: defined twice",
		`output: renders "../../etc/x", not a valid store key`,
		"max_output_bytes: the default, 16777216, is more than store.max_body_bytes (1048576)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckSet = %v\nwant it to mention %q", err, want)
		}
	}
}

// ValidName takes what the regexp it used takes, for strings of up to
// four of every character that matters.
func TestValidName_AsTheRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	alphabet := []byte("az09-A_.\n\xff")
	var walk func(s []byte)
	walk = func(s []byte) {
		if got, want := jobs.ValidName(string(s)), re.Match(s); got != want {
			t.Fatalf("ValidName(%q) = %v, the regexp says %v", s, got, want)
		}
		if len(s) == 4 {
			return
		}
		for _, c := range alphabet {
			walk(append(s, c))
		}
	}
	walk(nil)
}

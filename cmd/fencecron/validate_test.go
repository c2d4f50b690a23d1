package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fencecron.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The reference example is valid, and the summary lists each job's next
// five fire times in its own zone, across a daylight-saving change.
func TestValidateFile_Reference(t *testing.T) {
	t.Setenv("FENCECRON_SECRET", "a-secret-of-at-least-32-bytes-0123456789")
	now := time.Date(2026, 7, 15, 12, 0, 0, 0, time.UTC)
	var stdout, stderr bytes.Buffer
	if err := validateFile("../../deploy/examples/fencecron.yaml", now, &stdout, &stderr); err != nil {
		t.Fatalf("validate: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"../../deploy/examples/fencecron.yaml: valid\n",
		"node n1 (server) advertise 127.0.0.1, ports http 8080 gossip 7946 raft 7947, data /var/lib/fencecron\n",
		"store bolt /var/lib/fencecron/store.db, served over HTTP\n",
		"monthly-report: 0 0 9 1 * * in Europe/Berlin (dst spring shift, fall once)\n" +
			"  Sat 2026-08-01 09:00:00 CEST\n" +
			"  Tue 2026-09-01 09:00:00 CEST\n" +
			"  Thu 2026-10-01 09:00:00 CEST\n" +
			"  Sun 2026-11-01 09:00:00 CET\n" +
			"  Tue 2026-12-01 09:00:00 CET\n",
		"nightly-cleanup: 30 2 * * * | @every 6h in America/New_York (dst spring skip, fall twice; jitter up to 2m0s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// `fencecron validate` through the command dispatcher: every problem on
// stderr with its position, exit status 1.
func TestRun_ValidateInvalid(t *testing.T) {
	path := writeFile(t, `node:
  name: n1
  bootstrap_expect: 1
cluster:
  secret: ${FENCECRON_TEST_UNSET_SECRET}
jobs:
  - name: report
    schedule: "0 9 * *"
    command: [/bin/true]
    timout: 5m
`)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"validate", path}, &stdout, &stderr)
	var code exitCode
	if !errors.As(err, &code) || code != 1 {
		t.Fatalf("err = %v, want exit status 1", err)
	}
	want := "warning: " + path + `:5:11: cluster.secret: environment variable FENCECRON_TEST_UNSET_SECRET is not set (checked without it; the node needs it set to start)
` + path + `:8:15: jobs[0].schedule: "0 9 * *": want 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first), got 4
` + path + `:10:5: jobs[0]: unknown field "timout" (did you mean "timeout"?)
` + path + `: 2 problems
`
	if got := stderr.String(); got != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout: %s", stdout.String())
	}
}

func TestRun_ValidateValidJobsOnly(t *testing.T) {
	path := writeFile(t, "jobs:\n  - {name: tick, schedule: '@every 90s', command: [/bin/true]}\n")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"validate", path}, &stdout, &stderr); err != nil {
		t.Fatalf("err = %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "1 job, hash ") || !strings.Contains(out, "tick: @every 90s in UTC\n") {
		t.Errorf("summary:\n%s", out)
	}
	// Five fire times, 90s apart.
	var times []time.Time
	for _, line := range strings.Split(out, "\n") {
		if ts, err := time.Parse("Mon 2006-01-02 15:04:05 MST", strings.TrimSpace(line)); err == nil {
			times = append(times, ts)
		}
	}
	if len(times) != 5 {
		t.Fatalf("%d fire times in:\n%s", len(times), out)
	}
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d != 90*time.Second {
			t.Errorf("fire times %d and %d are %s apart", i-1, i, d)
		}
	}
}

func TestRun_ValidateUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"validate"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("no file: err = %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(stderr.String(), "Usage: fencecron validate FILE") {
		t.Errorf("usage not printed: %q", stderr.String())
	}
	err := run(context.Background(), []string{"validate", filepath.Join(t.TempDir(), "none.yaml")}, &stdout, &stderr)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

// A literal secret in a world-readable file: validate prints a warning on
// stderr, still summarizes the file and exits 0; the same file at 0600
// is quiet.
func TestRun_ValidateWarnsOfReadableSecret(t *testing.T) {
	const secret = "a-literal-cluster-secret-0123456789-xyz"
	path := writeFile(t, "node: {name: n1, bootstrap_expect: 1}\ncluster:\n  secret: "+secret+"\n")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"validate", path}, &stdout, &stderr); err != nil {
		t.Fatalf("err = %v, want exit status 0 (a warning)\n%s", err, stderr.String())
	}
	want := "warning: " + path + ":3:11: cluster.secret: written in a file the group or others may read (mode 0644): chmod 600 " + path
	if got := stderr.String(); !strings.HasPrefix(got, want) || strings.Contains(got, secret) {
		t.Errorf("stderr = %q, want it to start with %q and not to hold the secret", got, want)
	}
	if !strings.Contains(stdout.String(), path+": valid\n") {
		t.Errorf("stdout: %s", stdout.String())
	}

	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if err := run(context.Background(), []string{"validate", path}, &stdout, &stderr); err != nil || stderr.Len() != 0 {
		t.Errorf("mode 0600: err = %v, stderr = %q; want no warning", err, stderr.String())
	}
}

// Overlapping token scopes and an output outside its own job's scope are
// warnings: named on stderr, the file still valid, exit status 0.
func TestValidateFile_ScopeWarnings(t *testing.T) {
	path := writeFile(t, `jobs:
  - name: all-reports
    schedule: "@daily"
    command: [/bin/true]
    output: 'reports/{{ .RunID }}.csv'
  - name: monthly
    schedule: "@daily"
    command: [/bin/true]
    output: 'reports/monthly/{{ .RunID }}.csv'
  - name: daily
    schedule: "@daily"
    command: [/bin/true]
    output: 'reports/{{ .RunID }}.json'
  - name: loose
    schedule: "@daily"
    command: [/bin/true]
    output: '{{ .Job }}-{{ .RunID }}.txt'
  - name: quiet
    schedule: "@daily"
    command: [/bin/true]
`)
	now := time.Date(2026, 7, 15, 12, 0, 0, 0, time.UTC)
	var stdout, stderr bytes.Buffer
	if err := validateFile(path, now, &stdout, &stderr); err != nil {
		t.Fatalf("validate: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), path+": valid\n") {
		t.Errorf("stdout does not say valid:\n%s", stdout.String())
	}
	want := "warning: " + path + `: jobs all-reports and daily share the token scope "reports/": each can publish over the other's keys, and they share its quota
warning: ` + path + `: job monthly's token scope "reports/monthly/" lies inside job all-reports's scope "reports/": all-reports can publish over monthly's keys
warning: ` + path + `: job monthly's token scope "reports/monthly/" lies inside job daily's scope "reports/": daily can publish over monthly's keys
warning: ` + path + `: job loose's output "loose-loose@20260715T120000Z.txt" is outside its token scope "loose/" (its output template has no literal directory): the worker publishes its stdout there, but the job's own ` + "`fencecron publish`" + ` to it is refused; give the template a directory, such as "loose/{{ .Job }}-{{ .RunID }}.txt"
`
	if got := stderr.String(); got != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
	}
}

// `fencecron validate` reports what is wrong with an HTTP job, every
// problem at its line and column, and exits 1.
func TestValidate_HTTPJob(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.yaml")
	src := "jobs:\n" +
		"  - {name: a, schedule: '@daily', shell: x, http: {url: 'http://127.0.0.1/'}}\n" +
		"  - {name: b, schedule: '@daily', http: {url: 'ftp://127.0.0.1/', method: FETCH, expect_status: [99], ca_file: /nonexistent/ca.pem}}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	err := run(context.Background(), []string{"validate", path}, &stdout, &stderr)
	if exitCodeOf(err) != 1 {
		t.Errorf("validate = %v (exit %d), want exit 1", err, exitCodeOf(err))
	}
	out := stdout.String() + stderr.String()
	for _, want := range []string{
		":2:51: jobs[0].http: give http, or command or shell, not both",
		`:3:47: jobs[1].http.url: "ftp://127.0.0.1/": the scheme must be http or https`,
		`jobs[1].http.method: "FETCH": want one of GET`,
		"jobs[1].http.expect_status[0]: 99: an HTTP status is 100 to 599",
		"jobs[1].http.ca_file: cannot read the CA file",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}

// validate refuses a cycle, naming it, and an unknown name, and exits 1.
func TestValidate_RefusesAfterCyclesAndUnknownNames(t *testing.T) {
	path := writeFile(t, `jobs:
  - {name: a, after: [c], shell: "true"}
  - {name: b, after: [a], shell: "true"}
  - {name: c, after: [b], shell: "true"}
  - {name: d, after: [nightly], shell: "true"}
  - {name: e, schedule: "@daily", after: [a], shell: "true"}
`)
	out, err := exec.Command(proctest.Binary(t), "validate", path).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("validate: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range []string{
		path + ":3:",
		"jobs[1].after[0]: cycle: a → b → c → a",
		path + ":5:",
		`jobs[3].after[0]: "nightly" is not a job of this set`,
		"jobs[4].after: a job with after runs for its parents' scheduled times and has no schedule of its own",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("validate's output lacks %q:\n%s", want, out)
		}
	}
}

// validate takes day-of-week 7 as Sunday and lists Sundays; a step larger
// than its field's range is an error at the schedule's line and column.
func TestValidateFile_CronFields(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC) // a Wednesday
	var stdout, stderr bytes.Buffer
	path := writeFile(t, "jobs:\n  - name: weekly\n    schedule: \"0 1 * * 7\"\n    shell: \"true\"\n")
	if err := validateFile(path, now, &stdout, &stderr); err != nil {
		t.Fatalf("validate 0 1 * * 7: %v\n%s", err, stderr.String())
	}
	if want := "weekly: 0 1 * * 7 in UTC\n  Sun 2026-12-06 01:00:00 UTC\n  Sun 2026-12-13 01:00:00 UTC\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, stdout.String())
	}
	stdout.Reset()
	path = writeFile(t, "jobs:\n  - name: often\n    schedule: \"*/61 * * * *\"\n    shell: \"true\"\n")
	err := validateFile(path, now, &stdout, &stderr)
	if want := path + `:3:15: jobs[0].schedule: "*/61 * * * *": minute field "*/61" (character 3): step 61 is larger than the field's range 0-59`; err == nil || !strings.Contains(stderr.String(), want) {
		t.Errorf("validate */61: %v\nstderr: %s\nwant %q", err, stderr.String(), want)
	}
	if strings.Contains(stdout.String(), "often:") {
		t.Errorf("listed fire times of an invalid schedule:\n%s", stdout.String())
	}
}

package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// The fields inside a job are found in the YAML tree only when a problem
// needs their position (decoder.find): nested fields, list elements and
// map keys with dots in them are still reported where they are written,
// in a job after others.
func TestParse_JobProblemPositions(t *testing.T) {
	src := "jobs:\n" +
		"  - name: ok\n" +
		"    schedule: \"@daily\"\n" +
		"    command: [a]\n" +
		"  - name: Bad_Name\n" +
		"    schedules: [\"@daily\", \"61 * * * *\"]\n" +
		"    command: [a]\n" +
		"    env: {a.b: x, FENCECRON_X: y}\n" +
		"    dst: {spring: never}\n" +
		"    history: {runs: -1}\n" +
		"    target: {zone.io/x: a}\n" +
		"    timeout: -1s\n" +
		"    retries: 500\n" +
		"    retries: 600\n"
	_, err := parse("t.yaml", []byte(src), lookup, hostname)
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("err = %v, want *Error", err)
	}
	var got []string
	for _, p := range cerr.Problems {
		got = append(got, p.String())
	}
	want := []string{
		`t.yaml:5:11: jobs[1].name: "Bad_Name" is not a DNS label: 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit`,
		`t.yaml:6:27: jobs[1].schedules[1]: "61 * * * *": end of range (61) above maximum (59): 61`,
		`t.yaml:8:11: jobs[1].env: "a.b" is not a variable name (letters, digits, '_', not starting with a digit)`,
		`t.yaml:8:19: jobs[1].env: "FENCECRON_X": names starting with FENCECRON_ are reserved for the fence environment`,
		`t.yaml:9:19: jobs[1].dst.spring: "never": want shift or skip`,
		`t.yaml:10:21: jobs[1].history.runs: -1: want 1 to 100000`,
		`t.yaml:12:14: jobs[1].timeout: -1s: must not be negative`,
		`t.yaml:13:14: jobs[1].retries: 500: want 0 to 100`,
		`t.yaml:14:5: jobs[1].retries: duplicate field (first on line 13)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A job whose spec is larger than jobs.MaxSpecBytes is reported at the
// job itself, naming the cap.
func TestParse_SpecTooLarge(t *testing.T) {
	src := "jobs:\n" +
		"  - name: ok\n" +
		"    schedule: \"@daily\"\n" +
		"    command: [a]\n" +
		"  - name: huge\n" +
		"    schedule: \"@daily\"\n" +
		"    shell: " + strings.Repeat("x", jobs.MaxSpecBytes) + "\n"
	_, err := parse("t.yaml", []byte(src), lookup, hostname)
	var cerr *Error
	if !errors.As(err, &cerr) || len(cerr.Problems) != 1 {
		t.Fatalf("err = %v, want one problem", err)
	}
	if got, want := cerr.Problems[0].String(), "t.yaml:5:5: jobs[1]: the spec is 257 KiB of JSON; one job's spec is at most 256 KiB (jobs.MaxSpecBytes)"; !strings.HasPrefix(got, want) {
		t.Errorf("problem %q, want it to start %q", got, want)
	}
}

// When two jobs share a name, a problem of the second's after list is
// reported at the second's after, not at the first job.
func TestParse_AfterOfADuplicateName(t *testing.T) {
	src := "jobs:\n" +
		"  - name: x\n" +
		"    schedule: \"@daily\"\n" +
		"    command: [a]\n" +
		"  - name: x\n" +
		"    command: [a]\n" +
		"    after: [nope]\n"
	_, err := parse("t.yaml", []byte(src), lookup, hostname)
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("err = %v, want *Error", err)
	}
	var got []string
	for _, p := range cerr.Problems {
		got = append(got, p.String())
	}
	want := `t.yaml:7:13: jobs[1].after[0]: "nope" is not a job of this set`
	if !slices.Contains(got, want) {
		t.Errorf("problems:\n%s\nwant %s", strings.Join(got, "\n"), want)
	}
	for _, p := range got {
		if strings.Contains(p, "jobs[0].after") {
			t.Errorf("a problem of the second x's after points at the first x: %s", p)
		}
	}
}

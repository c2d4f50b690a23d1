package config

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestParse_JobsInParallelAsOnOne: a long jobs list decoded on every core
// gives the jobs, their positions, and the problems at their lines, that
// decoding it on one core gives; so does one decoded as it is parsed in
// parts, each item's nodes dropped once it is decoded (decodedJobs).
func TestParse_JobsInParallelAsOnOne(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(4, runtime.GOMAXPROCS(0))))
	defer func(old int) { parallelJobs = old }(parallelJobs)
	defer func(old int) { partsMin = old }(partsMin)
	for _, inParts := range []bool{false, true} {
		partsMin = 1 << 30
		if inParts {
			partsMin = 0
		}
		t.Run(fmt.Sprintf("in parts %v", inParts), testJobsInParallel)
	}
}

func testJobsInParallel(t *testing.T) {
	parse := func(data string, onOne bool) (*File, error) {
		parallelJobs = 1
		if onOne {
			parallelJobs = 1 << 30
		}
		return Parse("jobs.yaml", []byte(data))
	}
	var b strings.Builder
	b.WriteString("jobs:\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "  - name: job-%04d\n    schedule: \"%d * * * *\"\n    command: [\"/bin/true\"]\n", i, i%60)
		if i%1000 == 500 {
			// Items yaml.v3 parses, between the others.
			fmt.Fprintf(&b, "  - name: block-%04d\n    schedule: \"@daily\"\n    shell: |\n      echo %d\n", i, i)
		}
	}
	good := b.String()
	one, err := parse(good, true)
	if err != nil {
		t.Fatal(err)
	}
	all, err := parse(good, false)
	if err != nil || len(all.Jobs) != 3003 || !reflect.DeepEqual(all.Jobs, one.Jobs) {
		t.Fatalf("in parallel: %d jobs, %v; want the %d jobs decoded on one core", len(all.Jobs), err, len(one.Jobs))
	}
	if !reflect.DeepEqual(all.jobPos, one.jobPos) || one.jobPos[3002] != (Pos{File: "jobs.yaml", Line: 3*2999 + 3*4 + 2, Column: 11}) {
		t.Fatalf("in parallel, the jobs' positions differ from one core's: %v ... %v, want %v ... %v", all.jobPos[:2], all.jobPos[3002], one.jobPos[:2], one.jobPos[3002])
	}

	bad := good
	for _, r := range []struct{ from, to string }{
		{"name: job-0007\n", "name: job-0007\n    bogus: 1\n"},
		{"name: job-0100\n", "name: job-0005\n"},
		{"name: job-1600\n    schedule: \"40 * * * *\"", "name: job-1600\n    schedule: \"61 * * * *\""},
		{"name: job-2000\n", "name: job-2000\n    schedules: [\"@daily\"]\n"},
		{"  - name: job-2500\n    schedule: \"40 * * * *\"\n    command: [\"/bin/true\"]\n", "  - 42\n"},
		{"name: job-2999\n", "name: job-2999\n    timeout: banana\n"},
		{"name: block-1500\n", "name: block-1500\n    retries: many\n"},
		{"name: job-2998\n    schedule: \"58 * * * *\"\n    command: [\"/bin/true\"]", "name: job-2998\n    schedule: \"58 * * * *\"\n    command: 5"},
	} {
		if !strings.Contains(bad, r.from) {
			t.Fatalf("the file lacks %q", r.from)
		}
		bad = strings.Replace(bad, r.from, r.to, 1)
	}
	_, errOne := parse(bad, true)
	_, errAll := parse(bad, false)
	if errOne == nil || errAll == nil || errAll.Error() != errOne.Error() {
		t.Fatalf("in parallel: %v\non one core: %v", errAll, errOne)
	}
	for _, want := range []string{`jobs[7]: unknown field "bogus"`, "job-0005", "61 * * * *", "jobs[2002].schedules", "jobs[2502]", "jobs[3002].timeout", "jobs[3001].command", "jobs[1502].retries"} {
		if !strings.Contains(errAll.Error(), want) {
			t.Errorf("the problems do not name %s: %v", want, errAll)
		}
	}
}

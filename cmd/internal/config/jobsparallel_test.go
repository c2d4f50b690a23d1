package config

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestParse_JobsInParallelAsOnOne: a long jobs list decoded on every core
// gives the jobs, and the problems at their lines, that decoding it on
// one core gives.
func TestParse_JobsInParallelAsOnOne(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(4, runtime.GOMAXPROCS(0))))
	defer func(old int) { parallelJobs = old }(parallelJobs)
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
	}
	good := b.String()
	one, err := parse(good, true)
	if err != nil {
		t.Fatal(err)
	}
	all, err := parse(good, false)
	if err != nil || len(all.Jobs) != 3000 || !reflect.DeepEqual(all.Jobs, one.Jobs) {
		t.Fatalf("in parallel: %d jobs, %v; want the %d jobs decoded on one core", len(all.Jobs), err, len(one.Jobs))
	}

	bad := good
	for _, r := range []struct{ from, to string }{
		{"name: job-0007\n", "name: job-0007\n    bogus: 1\n"},
		{"name: job-0100\n", "name: job-0005\n"},
		{"name: job-1600\n    schedule: \"40 * * * *\"", "name: job-1600\n    schedule: \"61 * * * *\""},
		{"name: job-2000\n", "name: job-2000\n    schedules: [\"@daily\"]\n"},
		{"  - name: job-2500\n    schedule: \"40 * * * *\"\n    command: [\"/bin/true\"]\n", "  - 42\n"},
		{"name: job-2999\n", "name: job-2999\n    timeout: banana\n"},
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
	for _, want := range []string{`jobs[7]: unknown field "bogus"`, "job-0005", "61 * * * *", "jobs[2000].schedules", "jobs[2500]", "jobs[2999].timeout", "jobs[2998].command"} {
		if !strings.Contains(errAll.Error(), want) {
			t.Errorf("the problems do not name %s: %v", want, errAll)
		}
	}
}

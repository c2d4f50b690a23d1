package config

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// scaleFile is a jobs file of n jobs in the shape fencebench scale
// writes: daily at spread minutes, one command each.
func scaleFile(n int) []byte {
	var b bytes.Buffer
	b.WriteString("jobs:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: job-%06d\n    schedule: \"%d %d * * *\"\n    command: [\"/bin/true\"]\n", i, i%60, (i/60)%24)
	}
	return b.Bytes()
}

// BenchmarkParse_100kJobs is what `fencecron apply FILE` spends reading a
// 100,000-job file before it sends anything.
func BenchmarkParse_100kJobs(b *testing.B) {
	data := scaleFile(100_000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("jobs.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse_20kJobsEachWithAProblem is what `fencecron validate`
// spends on a large file with an unknown field in every job: each
// problem found, reported at its line, and no other check of that field.
func BenchmarkParse_20kJobsEachWithAProblem(b *testing.B) {
	data := bytes.ReplaceAll(scaleFile(20_000), []byte(`command: ["/bin/true"]`), []byte("command: [\"/bin/true\"]\n    bogus: 1"))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var cerr *Error
		if _, err := Parse("jobs.yaml", data); !errors.As(err, &cerr) || len(cerr.Problems) != 20_000 {
			b.Fatalf("got %v, want 20,000 problems", err)
		}
	}
}

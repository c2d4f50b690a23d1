package config

import (
	"bytes"
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

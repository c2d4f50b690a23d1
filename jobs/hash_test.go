package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// HashSpecs is the SHA-256 of the set sorted by name as json.Marshal
// writes it: nodes of different versions compare it to find drift, so
// however it is computed (a window at a time, on every core) it must stay
// that.
func TestHashSpecs_IsTheSortedSetsJSON(t *testing.T) {
	byDefinition := func(specs []Spec) string {
		sorted := slices.Clone(specs)
		slices.SortFunc(sorted, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
		b, err := json.Marshal(sorted)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:8])
	}
	for _, n := range []int{0, 1, 513, 8192, 8193, 20000} {
		specs := []Spec{}
		for i := range n {
			specs = append(specs, Spec{Name: fmt.Sprintf("j%d", n-i), Schedules: []string{"@daily"}, Env: map[string]string{"b": "1", "a": "2"}, Timeout: Duration(90e9)})
		}
		if got, want := HashSpecs(specs), byDefinition(specs); got != want {
			t.Errorf("%d jobs: hash %s, want %s", n, got, want)
		}
	}
	if got, want := HashSpecs(nil), byDefinition(nil); got != want {
		t.Errorf("nil set: hash %s, want %s", got, want)
	}
}

// BenchmarkHashSpecs_100k is the hash of a set of 100,000 jobs, which the
// leader computes for every apply, even of one changed job.
func BenchmarkHashSpecs_100k(b *testing.B) {
	specs := make([]Spec, 100_000)
	for i := range specs {
		specs[i] = Spec{Name: fmt.Sprintf("job-%06d", i), Schedules: []string{fmt.Sprintf("%d %d * * *", i%60, (i/60)%24)}, Command: []string{"/bin/true"}}
		specs[i].Normalize()
	}
	for b.Loop() {
		HashSpecs(specs)
	}
}

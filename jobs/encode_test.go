package jobs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// EncodeSpecs writes what json.Marshal writes of a []Spec, over several
// windows too.
func TestEncodeSpecs(t *testing.T) {
	big := make([]jobs.Spec, 20000)
	for i := range big {
		big[i] = jobs.Spec{Name: fmt.Sprintf("job-%d", i), Schedules: []string{"@every 1m"}, Shell: "echo <&>", Env: map[string]string{"B": "1", "A": "2"}}
	}
	for name, specs := range map[string][]jobs.Spec{"nil": nil, "empty": {}, "big": big} {
		want, err := json.Marshal(specs)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := jobs.EncodeSpecs(&b, specs); err != nil {
			t.Fatal(err)
		}
		if b.String() != string(want) {
			t.Errorf("%s: EncodeSpecs differs from json.Marshal", name)
		}
	}
}

// failAfter is a writer that takes n bytes and then fails.
type failAfter struct{ n int }

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

// A write that fails, in the middle of a window or at the last bracket,
// is EncodeSpecs' error: what reads the set (a request's body) is told.
func TestEncodeSpecs_WriteFails(t *testing.T) {
	big := make([]jobs.Spec, 30000)
	for i := range big {
		big[i] = jobs.Spec{Name: fmt.Sprintf("job-%d", i), Schedules: []string{"@every 1m"}, Command: []string{"/bin/true"}}
	}
	whole, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 100_000, len(whole) / 2, len(whole) - 1} {
		if err := jobs.EncodeSpecs(&failAfter{n: n}, big); err == nil || err.Error() != "disk full" {
			t.Errorf("a writer that fails after %d of %d bytes: %v; want its error", n, len(whole), err)
		}
	}
	if err := jobs.EncodeSpecs(&failAfter{n: len(whole)}, big); err != nil {
		t.Errorf("a writer that takes the whole set: %v", err)
	}
}

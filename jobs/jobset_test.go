package jobs_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// SpecBytes is the size of the spec's JSON.
func TestSpecBytes(t *testing.T) {
	s := jobs.Spec{Name: "a", Shell: "echo <&> \"x\"", Env: map[string]string{"K": "v"}}
	s.Normalize()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jobs.SpecBytes(&s), len(b); got != want {
		t.Errorf("SpecBytes = %d, want %d", got, want)
	}
}

// A job whose spec is larger than jobs.MaxSpecBytes is refused by
// CheckSet, the error naming the job and the cap, with its other
// problems; one just under the cap is accepted.
func TestCheckSet_SpecSize(t *testing.T) {
	job := func(name string, script int) jobs.Spec {
		s := jobs.Spec{Name: name, Schedules: []string{"@daily"}, Shell: strings.Repeat("x", script)}
		s.Normalize()
		return s
	}
	fits := job("fits", 1)
	fits.Shell = strings.Repeat("x", jobs.MaxSpecBytes-jobs.SpecBytes(&fits)+1)
	huge := job("huge", jobs.MaxSpecBytes)
	if got := jobs.SpecBytes(&fits); got != jobs.MaxSpecBytes {
		t.Fatalf("the fitting spec is %d bytes", got)
	}
	if err := jobs.CheckSet([]jobs.Spec{fits}, jobs.Limits{}, nil); err != nil {
		t.Errorf("a spec of exactly MaxSpecBytes: %v", err)
	}
	err := jobs.CheckSet([]jobs.Spec{fits, huge}, jobs.Limits{}, nil)
	if !errors.Is(err, jobs.ErrInvalidConfig) || !strings.Contains(err.Error(), "job huge:") ||
		!strings.Contains(err.Error(), "at most 256 KiB (jobs.MaxSpecBytes)") || strings.Contains(err.Error(), "job fits") {
		t.Errorf("CheckSet of a set with a spec over the cap: %v", err)
	}
	// Its other problems are kept beside it.
	huge.Retries = -1
	if err := jobs.CheckSet([]jobs.Spec{huge}, jobs.Limits{}, nil); err == nil || !strings.Contains(err.Error(), "retries") || !strings.Contains(err.Error(), "jobs.MaxSpecBytes") {
		t.Errorf("CheckSet of a large spec with another problem: %v", err)
	}
}

// CountSpecs counts the specs of a set as json.Marshal writes it, a
// job's group_limits (which has a name too) not as one more.
func TestCountSpecs(t *testing.T) {
	specs := []jobs.Spec{{Name: "a"}, {Name: "b", GroupLimits: &jobs.Group{Name: "g", MaxRunning: 1}}, {Name: "c"}}
	b, err := json.Marshal(specs)
	if err != nil {
		t.Fatal(err)
	}
	if n := jobs.CountSpecs(b); n != len(specs) {
		t.Errorf("CountSpecs = %d, want %d: %s", n, len(specs), b)
	}
}

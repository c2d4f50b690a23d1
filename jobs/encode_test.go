package jobs_test

import (
	"encoding/json"
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

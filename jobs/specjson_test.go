package jobs_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// A SpecList and a StrictSpecList decode as a []Spec does, allocated
// once; null stays a nil set, [] an empty one.
func TestSpecList_UnmarshalJSON(t *testing.T) {
	big := make([]jobs.Spec, 3000)
	for i := range big {
		big[i] = jobs.Spec{Name: fmt.Sprintf("job-%d", i), Schedules: []string{"@every 1m"}, Shell: `echo "name"`, Timeout: jobs.Duration(i)}
	}
	bigJSON, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"null":  `null`,
		"empty": `[]`,
		"small": `[{"name":"a","command":["x"]},{"name":"b","dst":{"spring":"skip"}}]`,
		"big":   string(bigJSON),
	} {
		t.Run(name, func(t *testing.T) {
			var want []jobs.Spec
			if err := json.Unmarshal([]byte(in), &want); err != nil {
				t.Fatal(err)
			}
			var lenient jobs.SpecList
			var strict jobs.StrictSpecList
			if err := json.Unmarshal([]byte(in), &lenient); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(in), &strict); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual([]jobs.Spec(lenient), want) || !reflect.DeepEqual([]jobs.Spec(strict), want) {
				t.Errorf("got %.200v and %.200v, want %.200v", lenient, strict, want)
			}
		})
	}
}

// A StrictSpecList refuses a field Spec does not have, which a SpecList
// ignores; neither takes what is not a list.
func TestStrictSpecList_UnmarshalJSON(t *testing.T) {
	in := []byte(`[{"name":"a"},{"name":"b","timout":"1s"}]`)
	var strict jobs.StrictSpecList
	if err := json.Unmarshal(in, &strict); err == nil || !strings.Contains(err.Error(), `unknown field "timout"`) {
		t.Errorf("strict: err = %v, want the unknown field", err)
	}
	var lenient jobs.SpecList
	if err := json.Unmarshal(in, &lenient); err != nil || len(lenient) != 2 {
		t.Errorf("lenient: %v, %v", lenient, err)
	}
	for _, in := range []string{`{"name":"a"}`, `"a"`, `[{"name":"a","timeout":"soon"}]`} {
		if err := json.Unmarshal([]byte(in), &strict); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

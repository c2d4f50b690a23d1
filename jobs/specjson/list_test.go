package specjson_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/jobs/specjson"
)

// A List and a StrictList decode as a []Spec does, allocated
// once; null stays a nil set, [] an empty one.
func TestList_UnmarshalJSON(t *testing.T) {
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
		// Decode reads the first job, then refuses the second.
		"mixed": strings.Replace(string(bigJSON[:len(bigJSON)-1]), `{"name":"job-1",`, `{"name": "job-1",`, 1) + "]",
	} {
		t.Run(name, func(t *testing.T) {
			var want []jobs.Spec
			if err := json.Unmarshal([]byte(in), &want); err != nil {
				t.Fatal(err)
			}
			var lenient specjson.List
			var strict specjson.StrictList
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

// A StrictList refuses a field Spec does not have, which a List
// ignores; neither takes what is not a list.
func TestStrictList_UnmarshalJSON(t *testing.T) {
	in := []byte(`[{"name":"a"},{"name":"b","timout":"1s"}]`)
	var strict specjson.StrictList
	if err := json.Unmarshal(in, &strict); err == nil || !strings.Contains(err.Error(), `unknown field "timout"`) {
		t.Errorf("strict: err = %v, want the unknown field", err)
	}
	var lenient specjson.List
	if err := json.Unmarshal(in, &lenient); err != nil || len(lenient) != 2 {
		t.Errorf("lenient: %v, %v", lenient, err)
	}
	for _, in := range []string{`{"name":"a"}`, `"a"`, `[{"name":"a","timeout":"soon"}]`} {
		if err := json.Unmarshal([]byte(in), &strict); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

// BenchmarkStrictList_100k: a set of 100,000 jobs as a field of a
// request (a follower forwarding an apply to the leader), decoded into a
// plain []jobs.Spec and into a StrictList.
func BenchmarkStrictList_100k(b *testing.B) {
	body, err := json.Marshal(map[string]any{"jobs": jobstest.Daily(100_000), "source": "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("[]jobs.Spec", func(b *testing.B) {
		for b.Loop() {
			var req struct {
				Jobs   []jobs.Spec `json:"jobs"`
				Source string      `json:"source"`
			}
			if err := json.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("StrictList", func(b *testing.B) {
		for b.Loop() {
			var req struct {
				Jobs   specjson.StrictList `json:"jobs"`
				Source string              `json:"source"`
			}
			if err := json.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

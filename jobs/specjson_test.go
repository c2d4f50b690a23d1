package jobs_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// A SpecList decodes as a []Spec does, whatever its strings hold, on
// every core: a set large enough to be split, and odd small ones.
func TestSpecList_UnmarshalJSON(t *testing.T) {
	big := make([]jobs.Spec, 3000)
	for i := range big {
		big[i] = jobs.Spec{Name: fmt.Sprintf("job-%d", i), Schedules: []string{"@every 1m"},
			Shell: fmt.Sprintf(`echo "[{%d}]," \\ '"'`, i), Env: map[string]string{"A": `}]"[{`}, Timeout: jobs.Duration(i)}
	}
	bigJSON, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"null":    `null`,
		"empty":   `[]`,
		"spaces":  " [ {\"name\":\"a\"} ,\n\t{\"name\":\"b,]}\\\"\"} ] ",
		"nested":  `[{"name":"a","command":["x","[y]"],"env":{"K":"{v}"},"dst":{"spring":"skip"}}]`,
		"unknown": `[{"name":"a","nope":[1,{"x":"]"}]}]`,
		"big":     string(bigJSON),
	} {
		t.Run(name, func(t *testing.T) {
			var want []jobs.Spec
			if err := json.Unmarshal([]byte(in), &want); err != nil {
				t.Fatal(err)
			}
			var got jobs.SpecList
			if err := json.Unmarshal([]byte(in), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual([]jobs.Spec(got), want) {
				t.Errorf("got %.300v\nwant %.300v", got, want)
			}
		})
	}
}

// A StrictSpecList refuses a field Spec does not have, and says which
// job has it; a list that is not one is refused too.
func TestStrictSpecList_UnmarshalJSON(t *testing.T) {
	var ok jobs.StrictSpecList
	if err := json.Unmarshal([]byte(`[{"name":"a","timeout":"90s"}]`), &ok); err != nil || len(ok) != 1 || ok[0].Timeout.D().Seconds() != 90 {
		t.Fatalf("got %+v, %v", ok, err)
	}
	for in, want := range map[string]string{
		`[{"name":"a"},{"name":"b","timout":"1s"}]`: `job 2 of the list: json: unknown field "timout"`,
		`{"name":"a"}`:                    "cannot unmarshal",
		`[{"name":"a","timeout":"soon"}]`: "job 1 of the list",
	} {
		var l jobs.StrictSpecList
		if err := json.Unmarshal([]byte(in), &l); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one containing %q", in, err, want)
		}
	}
}

// EncodeSpecs and a SpecList write what json.Marshal writes of a []Spec,
// over several windows too.
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
		got, err := json.Marshal(struct{ L jobs.SpecList }{specs})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != `{"L":`+string(want)+`}` {
			t.Errorf("%s: SpecList encodes differently from a []Spec", name)
		}
	}
}

package wire

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fencecron/fencecron/jobs/jobstest"
)

// AppendJobSetChanges writes what json.Marshal writes, odd strings and
// every field of a spec included, and DecodeJobSetChanges reads it back;
// a field the body should not have is refused.
func TestJobSetChanges_AsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 500 {
		var req JobSetChanges
		jobstest.Fill(r, reflect.ValueOf(&req).Elem())
		want, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendJobSetChanges(nil, req)
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: AppendJobSetChanges wrote\n%s\njson.Marshal\n%s", i, got, want)
		}
		back, err := DecodeJobSetChanges(got)
		if err != nil {
			t.Fatalf("case %d: decode: %v\n%s", i, err, got)
		}
		var viaJSON JobSetChanges
		if err := json.Unmarshal(got, &viaJSON); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, viaJSON) {
			t.Fatalf("case %d: decoded\n%+v\nencoding/json decodes\n%+v", i, back, viaJSON)
		}
	}
	for _, body := range []string{
		`{"source":"x","base":"0123456789abcdef","specs":[],"remove":[],"jobs":[]}`,
		`{"source":"x","base":"0123456789abcdef","specs":[{"name":"a","unknown":1}],"remove":null}`,
		`{"source":"x"} {}`,
	} {
		if _, err := DecodeJobSetChanges([]byte(body)); err == nil {
			t.Errorf("%s: decoded; want it refused", body)
		}
	}
}

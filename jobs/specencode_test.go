package jobs_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
)

// AppendSpec writes what json.Marshal writes, byte for byte, for specs
// with any field set or not, and strings that need escaping.
func TestAppendSpec_AsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		var s jobs.Spec
		jobstest.Fill(r, reflect.ValueOf(&s).Elem())
		want, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jobs.AppendSpec(nil, &s); !bytes.Equal(got, want) {
			t.Fatalf("spec %d:\n got %s\nwant %s", i, got, want)
		}
	}
	if got, want := jobs.AppendSpec(nil, &jobs.Spec{}), `{"name":"","schedules":null,"timeout":"0s","lease_ttl":"0s","retries":0,"backoff":"0s","overlap":"","misfire":"","catchup_window":"0s","max_output_bytes":0,"paused":false,"dst":{"spring":"","fall":""}}`; string(got) != want {
		t.Errorf("the zero spec: %s", got)
	}
}

// BenchmarkEncodeSpec: one spec of the shape fencebench scale applies,
// by encoding/json and by AppendSpec.
func BenchmarkEncodeSpec(b *testing.B) {
	s := jobs.Spec{Name: "job-012345", Schedules: []string{"45 3 * * *"}, Command: []string{"/bin/true"}, Target: map[string]string{"zone": "z3"}}
	s.Normalize()
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendSpec", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = jobs.AppendSpec(buf[:0], &s)
		}
	})
}

// Any string, as bytes of any kind, is quoted as json.Marshal quotes it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jobstest.OddStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jobs.AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}

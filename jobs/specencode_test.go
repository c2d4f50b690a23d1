package jobs

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// oddStrings are strings encoding/json escapes, or must not: quotes,
// backslashes, control characters, HTML's three, DEL, U+2028 and U+2029,
// invalid UTF-8, and plain text in several scripts.
var oddStrings = []string{
	"", "job-000001", `a"b`, `c\d`, "line\nbreak\r\t", "\b\f\x00\x01\x1f", "<script>&amp;</script>",
	"\x7f", "\u2028\u2029", "caf\xc3", "\xff\xfe", "日本語", "emoji \U0001F600", "a\u2028b\xe2\x80", "0 9 * * *",
}

// fill sets v (addressable) to a random value of its type: every field of
// a struct, recursively; a nil, empty or filled list, map or pointer.
func fill(r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(oddStrings[r.IntN(len(oddStrings))])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 1)
	case reflect.Int, reflect.Int64:
		// Zero often (omitempty), else anything, durations included.
		if r.IntN(3) > 0 {
			v.SetInt(r.Int64N(1<<50) - 1<<49)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && r.IntN(5) > 0 {
				fill(r, v.Field(i))
			}
		}
	case reflect.Pointer:
		if r.IntN(2) == 1 {
			p := reflect.New(v.Type().Elem())
			fill(r, p.Elem())
			v.Set(p)
		}
	case reflect.Slice:
		switch r.IntN(3) {
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		case 2:
			s := reflect.MakeSlice(v.Type(), 1+r.IntN(3), 3)
			for i := range s.Len() {
				fill(r, s.Index(i))
			}
			v.Set(s)
		}
	case reflect.Map:
		switch r.IntN(3) {
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
		case 2:
			m := reflect.MakeMap(v.Type())
			for range 1 + r.IntN(4) {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				fill(r, k)
				fill(r, e)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	default:
		panic("fill: no case for " + v.Type().String())
	}
}

// appendSpec writes what json.Marshal writes, byte for byte, for specs
// with any field set or not, and strings that need escaping.
func TestAppendSpec_AsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		var s Spec
		fill(r, reflect.ValueOf(&s).Elem())
		want, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendSpec(nil, &s); !bytes.Equal(got, want) {
			t.Fatalf("spec %d:\n got %s\nwant %s", i, got, want)
		}
	}
	if got, want := appendSpec(nil, &Spec{}), `{"name":"","schedules":null,"timeout":"0s","lease_ttl":"0s","retries":0,"backoff":"0s","overlap":"","misfire":"","catchup_window":"0s","max_output_bytes":0,"paused":false,"dst":{"spring":"","fall":""}}`; string(got) != want {
		t.Errorf("the zero spec: %s", got)
	}
}

// BenchmarkEncodeSpec: one spec of the shape fencebench scale applies,
// by encoding/json and by appendSpec.
func BenchmarkEncodeSpec(b *testing.B) {
	s := Spec{Name: "job-012345", Schedules: []string{"45 3 * * *"}, Command: []string{"/bin/true"}, Target: map[string]string{"zone": "z3"}}
	s.Normalize()
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendSpec", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendSpec(buf[:0], &s)
		}
	})
}

// Any string, as bytes of any kind, is quoted as json.Marshal quotes it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range oddStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}

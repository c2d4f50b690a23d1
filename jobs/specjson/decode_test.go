package specjson_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/jobs/specjson"
)

// asJSON decodes b as json.Unmarshal decodes a []jobs.Spec.
func asJSON(b []byte) ([]jobs.Spec, error) {
	var specs []jobs.Spec
	err := json.Unmarshal(b, &specs)
	return specs, err
}

// randomList is a list of up to 3 specs with any field set or not, as
// json.Marshal writes it.
func randomList(t *testing.T, r *rand.Rand) []byte {
	t.Helper()
	specs := make([]jobs.Spec, r.IntN(4))
	for k := range specs {
		jobstest.Fill(r, reflect.ValueOf(&specs[k]).Elem())
	}
	b, err := json.Marshal(specs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Decode reads every list json.Marshal writes, specs with any field set
// or not and strings that need escaping (invalid UTF-8 is written as
// \ufffd), as json.Unmarshal reads it, and says where the list ends.
func TestDecode_AsJSONUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		b := randomList(t, r)
		want, err := asJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		got, n, ok := specjson.Decode(append(b, `,"tail"`...), nil)
		if !ok {
			t.Fatalf("list %d, as json.Marshal writes it, refused: %s", i, b)
		}
		if n != len(b) {
			t.Fatalf("list %d: length %d, want %d", i, n, len(b))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("list %d: %s\n got %#v\nwant %#v", i, b, got, want)
		}
	}
}

// What json.Marshal does not write is refused, not read some other way:
// the caller then decodes it with encoding/json.
func TestDecode_RefusesOtherLayouts(t *testing.T) {
	one, err := json.Marshal([]jobs.Spec{jobstest.EveryMinute("a", "echo a > /tmp/x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := specjson.Decode(one, nil); !ok {
		t.Fatalf("json.Marshal's own list refused: %s", one)
	}
	s := string(one)
	for name, b := range map[string]string{
		"space":             strings.Replace(s, `"name":`, `"name": `, 1),
		"fields reordered":  strings.Replace(s, `{"name":"a","schedules":["@every 1m"]`, `{"schedules":["@every 1m"],"name":"a"`, 1),
		"unknown field":     strings.Replace(s, `{"name":"a"`, `{"name":"a","nme":"b"`, 1),
		"key in other case": strings.Replace(s, `"retries"`, `"Retries"`, 1),
		"float":             strings.Replace(s, `"retries":0`, `"retries":0.0`, 1),
		"leading zero":      strings.Replace(s, `"retries":0`, `"retries":00`, 1),
		"overflow":          strings.Replace(s, `"retries":0`, `"retries":9223372036854775808`, 1),
		"bad duration":      strings.Replace(s, `"timeout":"`, `"timeout":"x`, 1),
		"duration as int":   strings.Replace(s, `"backoff":"10s"`, `"backoff":10`, 1),
		"control character": strings.Replace(s, `"name":"a"`, "\"name\":\"a\x01\"", 1),
		"invalid UTF-8":     strings.Replace(s, `"name":"a"`, "\"name\":\"a\xff\"", 1),
		"surrogate":         strings.Replace(s, `"name":"a"`, `"name":"\ud83d\ude00"`, 1),
		"cut short":         s[:len(s)-2],
		"not a list":        "null",
	} {
		if b == s {
			t.Fatalf("%s: the case did not change the list", name)
		}
		if _, _, ok := specjson.Decode([]byte(b), nil); ok {
			t.Errorf("%s: read %s", name, b)
		}
	}
	// Escapes json.Marshal writes, one it does not but means the same,
	// and whole numbers at the ends of int64's range, read as
	// encoding/json reads them.
	for _, b := range []string{
		strings.Replace(s, `"name":"a"`, `"name":"\u003c\/\t\u00e9\u0000\ufffd"`, 1),
		strings.Replace(s, `"retries":0`, `"retries":9223372036854775807`, 1),
		strings.Replace(s, `"max_output_bytes":16777216`, `"max_output_bytes":-9223372036854775808`, 1),
		strings.Replace(s, `"retries":0`, `"retries":-0`, 1),
	} {
		if b == s {
			t.Fatalf("the case did not change the list")
		}
		got, _, ok := specjson.Decode([]byte(b), nil)
		if want, err := asJSON([]byte(b)); err != nil || !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %#v (ok %v), want %#v (%v)", b, got, ok, want, err)
		}
	}
}

// Whatever Decode reads, encoding/json reads the same; whatever it
// refuses, the caller decodes as before.
func FuzzDecode(f *testing.F) {
	for _, s := range [][]jobs.Spec{{}, jobstest.Daily(2), {jobstest.EveryMinute("a", "echo <&> \u2028")}} {
		b, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, n, ok := specjson.Decode(b, nil)
		if !ok {
			return
		}
		want, err := asJSON(b[:n])
		if err != nil {
			t.Fatalf("read %s, which encoding/json refuses: %v", b[:n], err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %#v\nwant %#v", b[:n], got, want)
		}
	})
}

// BenchmarkDecode_100k: the specs of `fencebench scale`, by encoding/json
// (into a list allocated once, as the web handler does) and by Decode.
func BenchmarkDecode_100k(b *testing.B) {
	body, err := json.Marshal(jobstest.Daily(100_000))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			specs := make([]jobs.Spec, 0, jobs.CountSpecs(body))
			if err := json.Unmarshal(body, &specs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decode", func(b *testing.B) {
		for b.Loop() {
			if _, _, ok := specjson.Decode(body, make([]jobs.Spec, 0, jobs.CountSpecs(body))); !ok {
				b.Fatal("refused")
			}
		}
	})
}

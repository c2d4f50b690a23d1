package specjson_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/jobs/specjson"
)

// streamed feeds b to a Stream in pieces of random sizes, as a body
// arrives, giving it again what it did not use each time; n is the
// bytes it used in all.
func streamed(b []byte, r *rand.Rand) (specs []jobs.Spec, n int, done, ok bool) {
	s := specjson.NewStream(nil, r.IntN(3))
	var pending []byte
	ok = true
	for off := 0; off < len(b) && !done && ok; {
		k := 1 + r.IntN(min(len(b)-off, 64))
		pending = append(pending, b[off:off+k]...)
		off += k
		var used int
		used, done, ok = s.Feed(pending)
		n += used
		pending = append([]byte(nil), pending[used:]...)
	}
	return s.Specs(), n, done, ok
}

// A list fed in pieces decodes as Decode decodes it whole, and ends
// where Decode says it ends.
func TestStream_AsDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		b := append(randomList(t, r), `,"tail"`...)
		want, wantN, _ := specjson.Decode(b, nil)
		got, n, done, ok := streamed(b, r)
		if !done || !ok || n != wantN || !reflect.DeepEqual(got, want) {
			t.Fatalf("list %d: %s\nstreamed: %d bytes, done %v, ok %v, %#v\nDecode: %d bytes, %#v", i, b, n, done, ok, got, wantN, want)
		}
	}
}

// A list changed a byte at a time, or cut: what the Stream reads whole
// Decode reads the same, and what Decode reads the Stream reads.
func TestStream_RefusesWhatDecodeRefuses(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	base, err := json.Marshal(append(jobstest.Daily(3), jobstest.EveryMinute("a", `echo "{[<&>]}" \ \u2028`)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		b := append([]byte(nil), base...)
		switch r.IntN(3) {
		case 0:
			b[r.IntN(len(b))] = "{}[]\",:\\ax0"[r.IntN(11)]
		case 1:
			b = b[:r.IntN(len(b))]
		default:
			b = append(b[:r.IntN(len(b))], b[r.IntN(len(b)):]...)
		}
		want, wantN, wantOK := specjson.Decode(b, nil)
		got, n, done, ok := streamed(b, r)
		switch {
		case done && ok && (!wantOK || n != wantN || !reflect.DeepEqual(got, want)):
			t.Fatalf("case %d: %s\nstreamed %d bytes, %#v\nDecode: %d bytes, ok %v, %#v", i, b, n, got, wantN, wantOK, want)
		case wantOK && !(done && ok):
			t.Fatalf("case %d: %s\nDecode reads %d bytes; the Stream: done %v, ok %v", i, b, wantN, done, ok)
		}
	}
}

package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/fencecron/fencecron/jobs"
)

// strictDecode is how the node decoded the body before
// DecodeJobSetDigests: encoding/json, unknown fields refused.
func strictDecode(body []byte) (JobSetDigests, error) {
	var req JobSetDigests
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	return req, err
}

// A body decodes to what encoding/json decodes it to, read directly or
// not, and is refused where encoding/json refuses it; AppendJobSetDigests
// writes what json.Marshal writes.
func TestDecodeJobSetDigests_AsEncodingJSON(t *testing.T) {
	odd := []string{"", "job-1", "team:job", `a"b`, `c\d`, "x\ny", "<&>", "\u2028", "caf\xc3", "日本", "\x7f", "/", "0123456789abcdef"}
	r := rand.New(rand.NewPCG(3, 4))
	var bodies []string
	for range 2000 {
		req := JobSetDigests{Source: odd[r.IntN(len(odd))]}
		if r.IntN(4) > 0 {
			req.Jobs = make([]JobDigest, r.IntN(5))
		}
		for i := range req.Jobs {
			req.Jobs[i] = JobDigest{Name: odd[r.IntN(len(odd))], Digest: odd[r.IntN(len(odd))]}
		}
		for range r.IntN(3) {
			req.Specs = append(req.Specs, jobs.Spec{Name: odd[r.IntN(len(odd))], Schedules: []string{"@daily"}, Command: []string{"x"}})
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if a, err := AppendJobSetDigests(nil, req); err != nil || !bytes.Equal(a, b) {
			t.Fatalf("AppendJobSetDigests(%#v):\n%s, %v\njson.Marshal:\n%s", req, a, err, b)
		}
		bodies = append(bodies, string(b), string(b)+"\n")
	}
	const one = `{"name":"a","digest":"b"}`
	bodies = append(bodies, "", "null", "{}", `{"source":"s"}`, `{"source":"s","jobs":[]}`, `{"source":"s","jobs":null}`,
		`{"source":"s","jobs":[`+one+`]`, `{"source":"s","jobs":[`+one+`,]}`, `{"source":"s","jobs":[`+one+` ]}`,
		`{"source":"s","jobs":[{"digest":"b","name":"a"}]}`, `{"source":"s","jobs":[{"name":"a","digest":"b","x":1}]}`,
		`{"source":"s","jobs":[{"name":"a"}]}`, `{"source":"s","jobs":[{"name":"a","name":"c","digest":"b"}]}`,
		`{"source":"s","jobs":[{"name":"a\u0041","digest":"b"}]}`, `{"source":"s","jobs":[{"name":"a`+"\x01"+`","digest":"b"}]}`,
		`{"source":"s","jobs":[{"name":1,"digest":"b"}]}`, `{"source":"s","jobs":[`+one+one+`]}`, `{"source":"s","jobs":[null]}`,
		`{"source":"s","jobs":[`+one+`],"specs":null}`, `{"source":"s","jobs":[`+one+`],"specs":[]}`,
		`{"source":"s","jobs":[`+one+`],"specs":[{"name":"a","bogus":1}]}`, `{"source":"s","jobs":[`+one+`],"specs":[{"name":"a"}]x}`,
		`{"source":"s","jobs":[`+one+`],"specs":[{"name":"a"}],"x":1}`, `{"source":"s","jobs":[`+one+`],"other":1}`,
		`{"source":"s","jobs":[`+one+`]}x`, `{"source":"s","jobs":[`+one+`]}}`, `{"jobs":[`+one+`],"source":"s"}`)
	for _, body := range bodies {
		want, wantErr := strictDecode([]byte(body))
		got, gotErr := DecodeJobSetDigests([]byte(body))
		if (gotErr != nil) != (wantErr != nil) || gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %#v, %v\nwant %#v, %v", body, got, gotErr, want, wantErr)
		}
	}
}

// BenchmarkDecodeJobSetDigests_100k is the body of one apply by digest
// of 100,000 jobs, one changed, decoded directly and by encoding/json.
func BenchmarkDecodeJobSetDigests_100k(b *testing.B) {
	req := JobSetDigests{Source: "fencecron apply jobs.yaml from host", Jobs: make([]JobDigest, 100_000)}
	for i := range req.Jobs {
		req.Jobs[i] = JobDigest{Name: fmt.Sprintf("job-%06d", i), Digest: fmt.Sprintf("%016x", i*7919)}
	}
	req.Specs = []jobs.Spec{{Name: "job-050000", Schedules: []string{"21 17 * * *"}, Command: []string{"/bin/true"}}}
	body, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		decode func([]byte) (JobSetDigests, error)
	}{{"direct", DecodeJobSetDigests}, {"encoding_json", strictDecode}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if got, err := tc.decode(body); err != nil || len(got.Jobs) != len(req.Jobs) || len(got.Specs) != 1 {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendJobSetDigests_100k is the body of one apply by digest of
// 100,000 jobs, one changed, written directly and by json.Marshal.
func BenchmarkAppendJobSetDigests_100k(b *testing.B) {
	req := JobSetDigests{Source: "fencecron apply jobs.yaml from host", Jobs: make([]JobDigest, 100_000)}
	for i := range req.Jobs {
		req.Jobs[i] = JobDigest{Name: fmt.Sprintf("job-%06d", i), Digest: fmt.Sprintf("%016x", i*7919)}
	}
	req.Specs = []jobs.Spec{{Name: "job-050000", Schedules: []string{"21 17 * * *"}, Command: []string{"/bin/true"}}}
	for _, tc := range []struct {
		name   string
		encode func(JobSetDigests) ([]byte, error)
	}{
		{"direct", func(r JobSetDigests) ([]byte, error) { return AppendJobSetDigests(nil, r) }},
		{"encoding_json", func(r JobSetDigests) ([]byte, error) { return json.Marshal(r) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.encode(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

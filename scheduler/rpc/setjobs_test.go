package rpc

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
)

// A forwarded apply's body is what json.Marshal writes for it, byte for
// byte: a leader of any version reads it as it read one before.
func TestEncodeSetJobs_AsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	odd := jobstest.OddStrings
	for range 500 {
		req := setJobsRequest{Source: odd[r.IntN(len(odd))]}
		if r.IntN(4) > 0 {
			req.Jobs = make([]jobs.Spec, r.IntN(4))
		}
		for i := range req.Jobs {
			jobstest.Fill(r, reflect.ValueOf(&req.Jobs[i]).Elem())
		}
		switch r.IntN(3) {
		case 1:
			req.Scope = []string{}
		case 2:
			req.Scope = []string{odd[r.IntN(len(odd))], "team-*"}
		}
		want, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeSetJobs(req)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("encodeSetJobs:\n%s, %v\njson.Marshal:\n%s", got, err, want)
		}
	}
}

// A forwarded apply's body decodes to what a json.Decoder refusing
// unknown fields decodes it to, read directly or not, and is refused
// where that decoder refuses it.
func TestDecodeBody_SetJobsAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	odd := jobstest.OddStrings
	var bodies []string
	for range 300 {
		req := setJobsRequest{Source: odd[r.IntN(len(odd))], Jobs: make([]jobs.Spec, r.IntN(4))}
		for i := range req.Jobs {
			jobstest.Fill(r, reflect.ValueOf(&req.Jobs[i]).Elem())
		}
		if r.IntN(4) == 0 {
			req.Scope = []string{"team-*"}
		}
		b, err := encodeSetJobs(req)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b), string(b)+"\n")
	}
	one, err := encodeSetJobs(setJobsRequest{Source: "s", Jobs: []jobs.Spec{jobstest.EveryMinute("a", "true")}})
	if err != nil {
		t.Fatal(err)
	}
	p := string(one)
	bodies = append(bodies, "", "null", "{}", `{"jobs":null,"source":"s"}`, `{"jobs":[],"source":"s"}`,
		p[:len(p)-1], p+"x", p[:len(p)-1]+`,"x":1}`, p[:len(p)-1]+`,"jobs":null}`, p[:len(p)-1]+`,"source":"t"}`,
		strings.Replace(p, `"shell":"true"`, `"shell":"true","bogus":1`, 1),
		strings.Replace(p, `"source":"s"`, `"source":"s\u0041"`, 1))
	direct := 0
	for _, body := range bodies {
		var want setJobsRequest
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		wantErr := dec.Decode(&want)
		var got setJobsRequest
		err := decodeBody(strings.NewReader(body), &got)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s:\n error %v, encoding/json's %v", body, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %#v\nwant %#v", body, got, want)
		}
		var plain setJobsRequest
		if plain.decodePlain([]byte(body)) {
			direct++
		}
	}
	if direct < len(bodies)/3 {
		t.Errorf("%d of %d bodies read directly: the test no longer exercises the direct path", direct, len(bodies))
	}
}

// BenchmarkEncodeSetJobs_100k: a follower forwarding an apply of
// 100,000 jobs, by json.Marshal and by encodeSetJobs.
func BenchmarkEncodeSetJobs_100k(b *testing.B) {
	req := setJobsRequest{Jobs: jobstest.Daily(100_000), Source: "bench"}
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encodeSetJobs", func(b *testing.B) {
		for b.Loop() {
			if _, err := encodeSetJobs(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeBody_SetJobs_100k: the leader reading a forwarded apply
// of 100,000 jobs, by a json.Decoder (into a StrictList) and by
// decodeBody.
func BenchmarkDecodeBody_SetJobs_100k(b *testing.B) {
	body, err := encodeSetJobs(setJobsRequest{Jobs: jobstest.Daily(100_000), Source: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json.Decoder", func(b *testing.B) {
		for b.Loop() {
			var req setJobsRequest
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeBody", func(b *testing.B) {
		for b.Loop() {
			var req setJobsRequest
			if err := decodeBody(bytes.NewReader(body), &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package rpc

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
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

package wire

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

// A job set's body decodes to what encoding/json, refusing unknown
// fields, decodes it to, read directly or not, and is refused where
// encoding/json refuses it.
func TestDecodeJobSetRequest_AsEncodingJSON(t *testing.T) {
	bodies := jobSetBodies(t)
	direct := 0
	for _, body := range bodies {
		want, wantErr := strictDecodeJobSet([]byte(body))
		got, err := DecodeJobSetRequest([]byte(body))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s:\n error %v, encoding/json's %v", body, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %#v\nwant %#v", body, got, want)
		}
		if _, ok := plainJobSetRequest([]byte(body), nil); ok {
			direct++
		}
	}
	if direct < len(bodies)/3 {
		t.Errorf("%d of %d bodies read directly: the test no longer exercises the direct path", direct, len(bodies))
	}
}

// jobSetBodies are bodies of PUT /api/v1/jobset: as json.Marshal writes
// them, with odd sources and specs with any field set or not, and others
// encoding/json reads or refuses.
func jobSetBodies(t *testing.T) []string {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	var bodies []string
	for range 500 {
		req := JobSetRequest{Source: jobstest.OddStrings[r.IntN(len(jobstest.OddStrings))], Jobs: make([]jobs.Spec, r.IntN(4))}
		for i := range req.Jobs {
			jobstest.Fill(r, reflect.ValueOf(&req.Jobs[i]).Elem())
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b), string(b)+"\n")
	}
	plain, err := json.Marshal(JobSetRequest{Source: "s", Jobs: []jobs.Spec{jobstest.EveryMinute("a", "true")}})
	if err != nil {
		t.Fatal(err)
	}
	p := string(plain)
	// Refused by specjson after it wrote the first job: encoding/json
	// reads the body into the same list.
	two, err := json.Marshal(JobSetRequest{Source: "s", Jobs: []jobs.Spec{jobstest.EveryMinute("a", "true"), jobstest.EveryMinute("b", "true")}})
	if err != nil {
		t.Fatal(err)
	}
	bodies = append(bodies, strings.Replace(string(two), `"name":"b"`, `"name": "b"`, 1))
	bodies = append(bodies, "", "null", "{}", `{"source":"s"}`, `{"source":"s","jobs":[]}`, `{"source":"s","jobs":null}`,
		p[:len(p)-1], p+"x", p[:len(p)-1]+`,"x":1}`, p[:len(p)-1]+`,"jobs":null}`, p[:len(p)-1]+`,"source":"t"}`,
		strings.Replace(p, `"shell":"true"`, `"shell":"true","bogus":1`, 1),
		strings.Replace(p, `"retries":0`, `"retries":1.5`, 1),
		strings.Replace(p, `"name":"a"`, `"name":"a\u0041"`, 1))
	return bodies
}

// strictDecodeJobSet is how the node decoded a job set's body before
// DecodeJobSetRequest: into a list allocated at the size the body shows.
func strictDecodeJobSet(body []byte) (JobSetRequest, error) {
	req := JobSetRequest{Jobs: make([]jobs.Spec, 0, jobs.CountSpecs(body))}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	return req, err
}

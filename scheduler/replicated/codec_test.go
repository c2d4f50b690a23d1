package replicated_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/scheduler/replicated"
)

// diffEntry is a set_jobs_diff entry as a leader writes it.
func diffEntry(t testing.TB, d replicated.SetJobsDiffCmd) string {
	b, err := json.Marshal(replicated.Command{V: replicated.LogVersion, Op: replicated.OpSetJobsDiff, SetJobsDiff: &d})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A set_jobs_diff entry is written as json.Marshal writes it, byte for
// byte, whatever it holds; any other as json.Marshal writes it.
func TestEncodeCommand_AsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	odd := jobstest.OddStrings
	var cmds []replicated.Command
	for range 1000 {
		d := replicated.SetJobsDiffCmd{Base: odd[r.IntN(len(odd))], Hash: odd[r.IntN(len(odd))], Source: odd[r.IntN(len(odd))], Part: r.IntN(3) - 1, Parts: r.IntN(3)}
		if r.IntN(2) == 0 {
			d.At = time.Unix(r.Int64N(1<<32), r.Int64N(1e9)).In(time.FixedZone("", 3600*(r.IntN(5)-2)))
		}
		if r.IntN(3) > 0 {
			d.Upsert = make([]jobs.Spec, r.IntN(4))
		}
		for i := range d.Upsert {
			jobstest.Fill(r, reflect.ValueOf(&d.Upsert[i]).Elem())
		}
		switch r.IntN(3) {
		case 1:
			d.Remove = []string{}
		case 2:
			for range 1 + r.IntN(3) {
				d.Remove = append(d.Remove, odd[r.IntN(len(odd))])
			}
		}
		cmds = append(cmds, replicated.Command{V: r.IntN(2) * replicated.LogVersion, Op: replicated.OpSetJobsDiff, SetJobsDiff: &d})
	}
	d := replicated.SetJobsDiffCmd{Base: "b", Upsert: jobstest.Daily(2)}
	cmds = append(cmds,
		replicated.Command{Op: replicated.OpSetJobsDiff},
		replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &d, Follow: &replicated.FollowCmd{}},
		replicated.Command{Op: replicated.OpGrant, SetJobsDiff: &d},
		replicated.Command{Op: replicated.OpElected, Elected: &replicated.ElectedCmd{Node: "n1"}})
	for _, c := range cmds {
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := replicated.EncodeCommand(c); err != nil || string(got) != string(want) {
			t.Fatalf("EncodeCommand:\n%s, %v\njson.Marshal:\n%s", got, err, want)
		}
	}
	bad := replicated.Command{Op: replicated.OpSetJobsDiff, SetJobsDiff: &replicated.SetJobsDiffCmd{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}
	if _, err := replicated.EncodeCommand(bad); err == nil {
		t.Error("a time json.Marshal cannot write was written")
	}
}

// An entry decodes to what json.Unmarshal decodes it to, whether its
// specs are read by specjson or not, and fails where json.Unmarshal
// fails: no replica may read an entry differently for reading it faster.
func TestDecodeCommand_AsJSONUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	odd := jobstest.OddStrings
	var entries []string
	for range 500 {
		// Mostly what a leader writes (a base in hex, names of jobs),
		// sometimes anything.
		plain := []string{"0123abcd", "job-000001", "fencecron apply jobs.yaml from host"}
		if r.IntN(4) == 0 {
			plain = odd
		}
		d := replicated.SetJobsDiffCmd{Base: plain[r.IntN(len(plain))], Hash: "h", Source: plain[r.IntN(len(plain))], At: time.Unix(r.Int64N(1<<32), 0).UTC(), Part: r.IntN(3), Parts: r.IntN(3)}
		d.Upsert = make([]jobs.Spec, r.IntN(4))
		for i := range d.Upsert {
			jobstest.Fill(r, reflect.ValueOf(&d.Upsert[i]).Elem())
		}
		for range r.IntN(3) {
			d.Remove = append(d.Remove, plain[r.IntN(len(plain))])
		}
		entries = append(entries, diffEntry(t, d))
	}
	one := diffEntry(t, replicated.SetJobsDiffCmd{Base: "b", Upsert: []jobs.Spec{jobstest.EveryMinute("a", "true")}, Remove: []string{"x"}, Hash: "h", Source: "s"})
	cut := strings.TrimSuffix(one, "}}")
	entries = append(entries, one, "", "{}", "null", `{"v":11,"op":"grant"}`, one[:len(one)-1], one+"x",
		// The last of two keys wins, whatever their case; ſ folds to s.
		cut+`,"upsert":null}}`, cut+`,"UPSERT":[]}}`, cut+`,"up\u017fert":[]}}`, cut+`,"upſert":[]}}`,
		cut+`},"set_jobs_diff":{"upsert":null}}`, cut+`},"set_jobs_diff":null}`, cut+`},"op":"grant"}`,
		// A second payload, merged into the first or replacing it.
		cut+`},"set_jobs_diff":{"hash":"h2"}}`, cut+`},"set_jobs_diff":null,"set_jobs_diff":{}}`,
		cut+`},"SET_JOBS_DIFF":null,"set_jobs_diff":{"base":"b"}}`)
	for _, c := range [][2]string{
		{`"base":"b"`, `"base":"b\"c"`}, {`"v":` + strconv.Itoa(replicated.LogVersion), `"v":`},
		{`"retries":0`, `"retries":"0"`}, {`"remove":["x"]`, `"remove":["upsert"]`},
	} {
		changed := strings.Replace(one, c[0], c[1], 1)
		if changed == one {
			t.Fatalf("%s is not in %s", c[0], one)
		}
		entries = append(entries, changed)
	}
	fast := 0
	for _, e := range entries {
		var want replicated.Command
		wantErr := json.Unmarshal([]byte(e), &want)
		got, err := replicated.DecodeCommand([]byte(e))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s:\n error %v, json.Unmarshal's %v", e, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %#v\nwant %#v", e, got, want)
		}
		if _, ok := replicated.DecodeSetJobsDiff([]byte(e)); ok {
			fast++
		}
	}
	if fast < len(entries)/3 {
		t.Errorf("%d of %d entries read by specjson: the test no longer exercises it", fast, len(entries))
	}
}

// Whatever the bytes, DecodeCommand decodes them as json.Unmarshal does.
func FuzzDecodeCommand(f *testing.F) {
	one := diffEntry(f, replicated.SetJobsDiffCmd{Base: "b", Upsert: jobstest.Daily(2), Remove: []string{"x"}, Hash: "h", Source: "s"})
	cut := strings.TrimSuffix(one, "}}")
	for _, e := range []string{one, cut + `},"set_jobs_diff":null,"set_jobs_diff":{}}`, cut + `,"Upsert":[]}}`} {
		f.Add([]byte(e))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want replicated.Command
		wantErr := json.Unmarshal(b, &want)
		got, err := replicated.DecodeCommand(b)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s:\n error %v, json.Unmarshal's %v", b, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %#v\nwant %#v", b, got, want)
		}
	})
}

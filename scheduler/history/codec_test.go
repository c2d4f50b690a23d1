package history

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// roundTrip stores rec under its key as the history now does and as it
// did before (JSON), reads both back, and fails unless they read the same.
func roundTrip(t *testing.T, rec runRecord) {
	t.Helper()
	k := runKey(rec.Run.Job, rec.Run.ScheduledAt)
	v := encodeRun(rec)
	if v[0] != formatRunV1 && v[0] != formatRunV1Raw {
		t.Fatalf("stored as %#x, want %#x or %#x", v[0], formatRunV1, formatRunV1Raw)
	}
	readsAsJSON(t, v, marshal(rec), rec.Index, func(v []byte) (runRecord, error) { return decodeRun(k, v) })
}

// readsAsJSON fails unless stored, a record of index in the format the
// history now writes, reads back as asJSON, the same record as the
// history wrote it before, and its index reads without decoding it.
func readsAsJSON[R any](t *testing.T, stored, asJSON []byte, index uint64, decode func([]byte) (R, error)) {
	t.Helper()
	got, err := decode(stored)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	want, err := decode(asJSON)
	if err != nil {
		t.Fatalf("decode JSON: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back differs from what JSON read back:\n got %#v\nwant %#v", got, want)
	}
	if idx, err := recordIndex(stored); err != nil || idx != index {
		t.Errorf("recordIndex = %d, %v; want %d", idx, err, index)
	}
}

func TestEncodeRun_ReadsAsJSONDid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 200 {
		r := realisticRun(rng, fmt.Sprintf("job-%d", i%7), t0.Add(time.Duration(i)*time.Minute), uint64(i))
		roundTrip(t, runRecord{Index: uint64(i) << 40, Run: r})
	}
	paris := time.FixedZone("CEST", 2*3600)
	code := -1
	for name, edit := range map[string]func(r *jobs.Run){
		"no attempts, nil":   func(r *jobs.Run) { r.Attempts = nil },
		"no attempts, empty": func(r *jobs.Run) { r.Attempts = []jobs.Attempt{} },
		"ids of its own": func(r *jobs.Run) {
			r.ID = "imported-1"
			r.Attempts[0].ID = "x"
		},
		"attempt id empty":        func(r *jobs.Run) { r.Attempts[0].ID = "" },
		"scheduled in a zone":     func(r *jobs.Run) { r.ScheduledAt = r.ScheduledAt.In(paris) },
		"scheduled in local time": func(r *jobs.Run) { r.ScheduledAt = r.ScheduledAt.Local() },
		"times in a zone": func(r *jobs.Run) {
			r.Attempts[0].StartedAt = r.Attempts[0].StartedAt.In(paris)
			r.Attempts[0].EndedAt = r.Attempts[0].EndedAt.In(paris)
		},
		"monotonic reading": func(r *jobs.Run) { r.Attempts[0].EndedAt = time.Now() },
		"zero times": func(r *jobs.Run) {
			r.Attempts[0].AcceptedAt, r.Attempts[0].StartedAt, r.Attempts[0].EndedAt = time.Time{}, time.Time{}, time.Time{}
		},
		"far times": func(r *jobs.Run) {
			r.Attempts[0].GrantedAt = time.Date(1, 2, 3, 4, 5, 6, 7, time.UTC)
			r.Attempts[0].EndedAt = time.Date(9999, 2, 3, 4, 5, 6, 7, time.UTC)
		},
		"no exit code":       func(r *jobs.Run) { r.Attempts[0].ExitCode = nil },
		"negative exit code": func(r *jobs.Run) { r.Attempts[0].ExitCode = &code },
		"lists": func(r *jobs.Run) {
			r.After = []string{"a@1", "b@2"}
			r.Attempts[0].StoreRefusals = []string{"stale_owner k greatest=2.1"}
		},
		"empty lists": func(r *jobs.Run) { r.After, r.Attempts[0].StoreRefusals = []string{}, []string{} },
		"flags": func(r *jobs.Run) {
			r.NoRetry, r.Forced, r.Attempts[0].Expired, r.Attempts[0].NeverStarted = true, true, true, true
		},
		"big tail": func(r *jobs.Run) { r.Attempts[0].StdoutTail = logTail(rng, 16<<10, "INFO") },
		"no tails": func(r *jobs.Run) {
			for i := range r.Attempts {
				r.Attempts[i].StdoutTail, r.Attempts[i].StderrTail = "", ""
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := realisticRun(rng, "nightly", t0.Add(time.Duration(rng.IntN(1e9))), 7)
			edit(&r)
			roundTrip(t, runRecord{Index: 3, Run: r})
		})
	}
}

// A run with no output tail is stored without deflating, and one with a
// tail deflated.
func TestEncodeRun_DeflatesOnlyWhatIsWorthIt(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	r := realisticRun(rng, "nightly", t0, 1)
	r.Attempts = r.Attempts[:1]
	if got := encodeRun(runRecord{Run: r})[0]; got != formatRunV1 {
		t.Errorf("a run with a tail stored as %#x, want %#x", got, formatRunV1)
	}
	r.Attempts[0].StdoutTail, r.Attempts[0].StderrTail = "", ""
	v := encodeRun(runRecord{Run: r})
	if got := v[0]; got != formatRunV1Raw {
		t.Errorf("a run without a tail stored as %#x, want %#x", got, formatRunV1Raw)
	}
	t.Logf("a run without a tail: %d bytes (JSON: %d)", len(v), len(marshal(runRecord{Run: r})))
}

// Every field of a run and of its attempts survives, so a field added to
// jobs.Run or jobs.Attempt fails here until the codec stores it.
func TestEncodeRun_KeepsEveryField(t *testing.T) {
	var r jobs.Run
	n := 0
	fill(reflect.ValueOf(&r).Elem(), &n)
	r.Job = "filled"
	r.ScheduledAt = t0
	roundTrip(t, runRecord{Index: 1, Run: r})
	// The derived ids are stored when they are not the derived ones, and
	// the fill made them not.
	r.ID = jobs.RunID(r.Job, r.ScheduledAt)
	for i := range r.Attempts {
		r.Attempts[i].ID = jobs.AttemptID(r.ID, r.Attempts[i].Number)
	}
	roundTrip(t, runRecord{Index: 1, Run: r})
}

// fill sets every field of v to a value of its own, distinct from zero.
func fill(v reflect.Value, n *int) {
	*n++
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(t0.Add(time.Duration(*n) * time.Millisecond)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), n)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	default:
		panic(fmt.Sprintf("fill: add kind %s (%s) here and to the codec", v.Kind(), v.Type()))
	}
}

// A damaged record is an error, never a panic or a run made up.
func TestDecodeRun_Damaged(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	r := realisticRun(rng, "nightly", t0, 1)
	k := runKey(r.Job, r.ScheduledAt)
	v := encodeRun(runRecord{Index: 5, Run: r})
	small := r
	small.Attempts = []jobs.Attempt{r.Attempts[0]}
	small.Attempts[0].StdoutTail, small.Attempts[0].StderrTail = "", ""
	for _, whole := range [][]byte{v, encodeRun(runRecord{Index: 5, Run: small})} {
		for n := range len(whole) {
			if _, err := decodeRun(k, whole[:n]); err == nil {
				t.Errorf("a record (%#x) cut to %d of %d bytes read without an error", whole[0], n, len(whole))
			}
		}
	}
	raw := bytes.Clone(v)
	raw[0] = formatRunV1Raw // deflated bytes read as a layout
	for _, bad := range [][]byte{{0x03, 1}, {0xff}, nil, raw} {
		if _, err := decodeRun(k, bad); err == nil {
			t.Errorf("decodeRun(%x) read without an error", bad)
		}
	}
	for i := 2; i < len(v); i++ {
		w := bytes.Clone(v)
		w[i] ^= 0x55
		decodeRun(k, w) // an error or a different run; never a panic
	}
}

// BenchmarkRunRecord is the CPU of storing and of reading one realistic
// run, compressed and as JSON (how it was stored before).
func BenchmarkRunRecord(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	recs := make([]runRecord, 64)
	for i := range recs {
		recs[i] = runRecord{Index: uint64(i), Run: realisticRun(rng, "nightly-backup", t0.Add(time.Duration(i)*time.Hour), uint64(i))}
	}
	for _, f := range []struct {
		name   string
		encode func(runRecord) []byte
	}{{"json", func(r runRecord) []byte { return marshal(r) }}, {"v1", encodeRun}} {
		b.Run(f.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			size, cpu := 0, cpuTime(b)
			for i := range b.N {
				size += len(f.encode(recs[i%len(recs)]))
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/run")
			b.ReportMetric(float64(size)/float64(b.N), "B/run")
		})
		b.Run(f.name+"/decode", func(b *testing.B) {
			vs := make([][]byte, len(recs))
			for i, r := range recs {
				vs[i] = f.encode(r)
			}
			b.ReportAllocs()
			cpu := cpuTime(b)
			for i := range b.N {
				r := recs[i%len(recs)]
				if _, err := decodeRun(runKey(r.Run.Job, r.Run.ScheduledAt), vs[i%len(recs)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/run")
		})
	}
}

// roundTripEvent stores rec as the history now does and as it did before
// (JSON), reads both back, and fails unless they read the same.
func roundTripEvent(t *testing.T, rec eventRecord) {
	t.Helper()
	v := encodeEvent(rec)
	if v[0] != formatEventV1 {
		t.Fatalf("stored as %#x, want %#x", v[0], formatEventV1)
	}
	readsAsJSON(t, v, marshal(rec), rec.Index, decodeEvent)
}

func TestEncodeEvent_ReadsAsJSONDid(t *testing.T) {
	paris := time.FixedZone("CEST", 2*3600)
	granted := jobs.Event{Seq: 7, Index: 41, Time: t0.Add(time.Millisecond), Kind: jobs.EventGranted, Node: "n2",
		Job: "backup", Run: "backup@20261203T210000Z", Attempt: "backup@20261203T210000Z.1",
		Token: &jobs.Fence{Epoch: 3, Seq: 41}, Detail: "attempt 1 to n2 with token 3.41"}
	for name, ev := range map[string]jobs.Event{
		"granted":        granted,
		"zero token":     func() jobs.Event { e := granted; e.Token = &jobs.Fence{}; return e }(),
		"no token":       {Seq: 8, Index: 42, Time: t0, Kind: jobs.EventElected, Node: "n1", Epoch: 4},
		"time in a zone": func() jobs.Event { e := granted; e.Time = e.Time.In(paris); return e }(),
		"local time":     func() jobs.Event { e := granted; e.Time = e.Time.Local(); return e }(),
		"zero time":      {Seq: 9, Kind: jobs.EventJobSet, Detail: "3 jobs: é, \"quoted\", <html>"},
		"empty":          {},
	} {
		t.Run(name, func(t *testing.T) { roundTripEvent(t, eventRecord{Index: 1 << 40, Event: ev}) })
	}
}

// Every field of an event survives, so a field added to jobs.Event
// fails here until the codec stores it.
func TestEncodeEvent_KeepsEveryField(t *testing.T) {
	var ev jobs.Event
	n := 0
	fill(reflect.ValueOf(&ev).Elem(), &n)
	roundTripEvent(t, eventRecord{Index: 3, Event: ev})
}

// A damaged event record is an error, never a panic or an event made up.
func TestDecodeEvent_Damaged(t *testing.T) {
	v := encodeEvent(eventRecord{Index: 5, Event: jobs.Event{Seq: 7, Time: t0, Kind: jobs.EventStarted, Job: "backup",
		Token: &jobs.Fence{Epoch: 1, Seq: 2}, Detail: "started"}})
	for n := range len(v) {
		if _, err := decodeEvent(v[:n]); err == nil {
			t.Errorf("a record cut to %d of %d bytes read without an error", n, len(v))
		}
	}
	if _, err := decodeEvent(append(bytes.Clone(v), 0)); err == nil {
		t.Error("a record with a byte too many read without an error")
	}
	for _, bad := range [][]byte{{0x04, 1}, {0xff}, nil} {
		if _, err := decodeEvent(bad); err == nil {
			t.Errorf("decodeEvent(%x) read without an error", bad)
		}
	}
	for i := 1; i < len(v); i++ {
		w := bytes.Clone(v)
		w[i] ^= 0x55
		decodeEvent(w) // an error or a different event; never a panic
	}
}

package history

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// How a run is stored. The history used to keep each run as the JSON of
// its runRecord, about 1 KB for a run with a tail of its output, and a
// file of 1.7 KB per run kept once bbolt's pages were counted. Now a run
// is stored as
//
//	formatRunV1  uvarint(index)  deflate(dictV1, fields)
//
// where fields is a plain binary layout of the run (below), without what
// its key already says (the job, the scheduled time, the ids derived from
// them), times as nanosecond differences from the one before, and the
// whole compressed with a preset dictionary of the values runs repeat,
// since one run alone is too short to teach a compressor anything. A run
// whose layout is shorter than deflateFrom (no output tail: a published
// output, most HTTP jobs) is stored as
//
//	formatRunV1Raw  uvarint(index)  fields
//
// because deflating costs several times what encoding JSON did, mostly
// in building Huffman codes for each record, and would save a few dozen
// bytes there.
//
// The first byte tells the formats apart: JSON always starts with '{', so
// records written before the upgrade read as they always did, beside new
// ones, and are never rewritten. A change of the layout or of the
// dictionary takes a new byte; the old byte keeps being read. The index
// stays outside the compressed part so that retention, which deletes a
// record for every one it stores, reads it without inflating anything.
//
// The bytes are this server's own: gap filling sends runs as JSON
// (RangePage), so servers of either format fill each other's gaps.
const (
	formatJSON     byte = '{'
	formatRunV1    byte = 0x01
	formatRunV1Raw byte = 0x02
	// formatEventV1 is an event, stored as
	//
	//	formatEventV1  uvarint(index)  fields
	//
	// in a plain layout (encodeEvent) and never deflated: an event is a
	// hundred bytes. A run brings three events, and JSON cost each server
	// more to write them than to write the run.
	formatEventV1 byte = 0x03
)

// deflateFrom is the shortest layout that is deflated.
const deflateFrom = 192

// runLevel is the deflate level of stored runs: at level 1 the standard
// library ignores a preset dictionary, and the levels above 2 save a few
// bytes a run for more CPU.
const runLevel = 2

// maxRunBytes bounds what one stored run inflates to (its tails are 16
// KiB at most each), so that a damaged record is an error, not an
// allocation without end.
const maxRunBytes = 16 << 20

// dictV1 holds the values runs repeat, the most frequent last (deflate
// refers to them more cheaply the closer they are to the data). Never
// change it: formatRunV1 records are inflated with exactly these bytes.
var dictV1 = []byte("context deadline exceeded" +
	"lease lost: the process group was killed" +
	"publish refused as stale_owner: the store holds newer token , this attempt has " +
	"cancelled: worker shutting downtimed out after signal: killed" +
	"stale_ownerconflictcancelledtimed_outfencedlostskippedpendingrunning" +
	"manualcatchupafterhttp://https://" +
	" WARN  ERROR  INFO  DEBUG Traceback (most recent call last):\n" +
	"exit code 2exit code 1" +
	"failedappliedsucceededschedulejobs//outputworker-")

// Bits of a run's flags.
const (
	runNoRetry uint64 = 1 << iota
	runForced
	// runAttemptsNil: Attempts is nil, not empty (JSON wrote null).
	runAttemptsNil
	// runOwnID: the id is not the one RunID derives, and is stored.
	runOwnID
)

// Bits of an attempt's flags.
const (
	attemptExpired uint64 = 1 << iota
	attemptNeverStarted
	attemptExitCode
	// attemptOwnID: the id is not the one AttemptID derives.
	attemptOwnID
	attemptStartInLog
	attemptStartConfirmed
)

// Tags of a stored time.
const (
	timeZero = iota
	// timeDelta: a UTC time, as nanoseconds after the time written before
	// it (the key's scheduled time for the first).
	timeDelta
	// timeText: any other, as its MarshalText, which reads back as JSON
	// read it.
	timeText
)

var (
	writers = sync.Pool{New: func() any {
		w, err := flate.NewWriterDict(nil, runLevel, dictV1)
		if err != nil {
			panic(err) // runLevel is a valid level
		}
		return w
	}}
	readers = sync.Pool{New: func() any { return flate.NewReaderDict(bytes.NewReader(nil), dictV1) }}
)

// encodeRun returns how rec is stored under its run key.
func encodeRun(rec runRecord) []byte {
	r := &rec.Run
	e := encoder{last: keyTime(r.ScheduledAt)}
	var flags uint64
	if r.NoRetry {
		flags |= runNoRetry
	}
	if r.Forced {
		flags |= runForced
	}
	if r.Attempts == nil {
		flags |= runAttemptsNil
	}
	if r.ID != jobs.RunID(r.Job, r.ScheduledAt) {
		flags |= runOwnID
	}
	e.uvarint(flags)
	if flags&runOwnID != 0 {
		e.string(r.ID)
	}
	e.time(r.ScheduledAt)
	e.string(r.Output)
	e.string(string(r.State))
	e.string(r.Reason)
	e.string(r.Trigger)
	e.strings(r.After)
	e.string(r.Group)
	e.uvarint(uint64(len(r.Attempts)))
	for i := range r.Attempts {
		a := &r.Attempts[i]
		var af uint64
		if a.Expired {
			af |= attemptExpired
		}
		if a.NeverStarted {
			af |= attemptNeverStarted
		}
		if a.ExitCode != nil {
			af |= attemptExitCode
		}
		if a.ID != jobs.AttemptID(r.ID, a.Number) {
			af |= attemptOwnID
		}
		if a.StartInLog {
			af |= attemptStartInLog
		}
		if a.StartConfirmed {
			af |= attemptStartConfirmed
		}
		e.uvarint(af)
		if af&attemptOwnID != 0 {
			e.string(a.ID)
		}
		e.varint(int64(a.Number))
		e.uvarint(a.Token.Epoch)
		e.uvarint(a.Token.Seq)
		e.string(a.Worker)
		e.string(string(a.State))
		e.time(a.GrantedAt)
		e.time(a.AcceptedAt)
		e.time(a.StartedAt)
		e.time(a.EndedAt)
		if a.ExitCode != nil {
			e.varint(int64(*a.ExitCode))
		}
		e.string(a.Signal)
		e.varint(int64(a.HTTPStatus))
		e.varint(a.ResponseBytes)
		e.string(a.StoreOutcome)
		e.uvarint(a.StoreVersion)
		e.string(a.Error)
		e.string(a.StderrTail)
		e.string(a.StdoutTail)
		e.strings(a.StoreRefusals)
	}

	if len(e.b) < deflateFrom {
		out := make([]byte, 0, 1+binary.MaxVarintLen64+len(e.b))
		out = append(out, formatRunV1Raw)
		out = binary.AppendUvarint(out, rec.Index)
		return append(out, e.b...)
	}
	out := bytes.NewBuffer(make([]byte, 0, 1+binary.MaxVarintLen64+len(e.b)/2))
	out.WriteByte(formatRunV1)
	out.Write(binary.AppendUvarint(nil, rec.Index))
	w := writers.Get().(*flate.Writer)
	defer writers.Put(w)
	w.Reset(out)
	// Writes to a bytes.Buffer do not fail.
	w.Write(e.b)
	w.Close()
	return out.Bytes()
}

// Bits of an event's flags.
const (
	// eventToken: Token is set (JSON omitted a nil one).
	eventToken uint64 = 1 << iota
)

// encodeEvent returns how rec is stored under its event key.
func encodeEvent(rec eventRecord) []byte {
	ev := &rec.Event
	e := encoder{b: make([]byte, 0, 96+len(ev.Detail))}
	e.b = append(e.b, formatEventV1)
	e.uvarint(rec.Index)
	var flags uint64
	if ev.Token != nil {
		flags |= eventToken
	}
	e.uvarint(flags)
	e.uvarint(ev.Seq)
	e.uvarint(ev.Index)
	e.time(ev.Time)
	e.string(ev.Kind)
	e.string(ev.Node)
	e.string(ev.Job)
	e.string(ev.Run)
	e.string(ev.Attempt)
	if ev.Token != nil {
		e.uvarint(ev.Token.Epoch)
		e.uvarint(ev.Token.Seq)
	}
	e.uvarint(ev.Epoch)
	e.string(ev.Detail)
	return e.b
}

// decodeEvent reads a stored event back, in either format, as JSON read
// it before.
func decodeEvent(v []byte) (eventRecord, error) {
	if len(v) == 0 {
		return eventRecord{}, errors.New("empty event record")
	}
	switch v[0] {
	case formatJSON:
		var rec eventRecord
		err := json.Unmarshal(v, &rec)
		return rec, err
	case formatEventV1:
		d := decoder{b: v[1:]}
		rec := eventRecord{Index: d.uvarint()}
		ev := &rec.Event
		flags := d.uvarint()
		ev.Seq = d.uvarint()
		ev.Index = d.uvarint()
		ev.Time = d.time()
		ev.Kind = d.string()
		ev.Node = d.string()
		ev.Job = d.string()
		ev.Run = d.string()
		ev.Attempt = d.string()
		if flags&eventToken != 0 {
			ev.Token = &jobs.Fence{Epoch: d.uvarint(), Seq: d.uvarint()}
		}
		ev.Epoch = d.uvarint()
		ev.Detail = d.string()
		if d.err != nil {
			return eventRecord{}, fmt.Errorf("event: %w", d.err)
		}
		if len(d.b) != 0 {
			return eventRecord{}, fmt.Errorf("event: %d bytes left over", len(d.b))
		}
		return rec, nil
	}
	return eventRecord{}, fmt.Errorf("event record of unknown format %#x (written by a newer version?)", v[0])
}

// decodeRun reads a stored run back, in either format, as JSON read it
// before: k is its key in the runs bucket.
func decodeRun(k, v []byte) (runRecord, error) {
	if len(v) == 0 {
		return runRecord{}, errors.New("empty run record")
	}
	switch v[0] {
	case formatJSON:
		var rec runRecord
		err := json.Unmarshal(v, &rec)
		return rec, err
	case formatRunV1, formatRunV1Raw:
		job, at, ok := splitRunKey(k)
		if !ok {
			return runRecord{}, fmt.Errorf("bad run key %q", k)
		}
		rec, err := decodeRunV1(job, at, v[0] == formatRunV1, v[1:])
		if err != nil {
			return runRecord{}, fmt.Errorf("run %s@%s: %w", job, at.Format(time.RFC3339Nano), err)
		}
		return rec, nil
	}
	return runRecord{}, fmt.Errorf("run record of unknown format %#x (written by a newer version?)", v[0])
}

func decodeRunV1(job string, at time.Time, deflated bool, v []byte) (runRecord, error) {
	index, n := binary.Uvarint(v)
	if n <= 0 {
		return runRecord{}, errors.New("bad index")
	}
	b := v[n:]
	if deflated {
		var err error
		if b, err = inflate(b); err != nil {
			return runRecord{}, err
		}
	}

	d := decoder{b: b, last: at}
	r := jobs.Run{Job: job}
	flags := d.uvarint()
	if flags&runOwnID != 0 {
		r.ID = d.string()
	}
	r.ScheduledAt = d.time()
	if flags&runOwnID == 0 {
		r.ID = jobs.RunID(r.Job, r.ScheduledAt)
	}
	r.Output = d.string()
	r.State = jobs.State(d.string())
	r.Reason = d.string()
	r.Trigger = d.string()
	r.After = d.strings()
	r.Group = d.string()
	r.NoRetry = flags&runNoRetry != 0
	r.Forced = flags&runForced != 0
	n = d.count()
	if flags&runAttemptsNil == 0 {
		r.Attempts = make([]jobs.Attempt, 0, n)
	}
	for range n {
		var a jobs.Attempt
		af := d.uvarint()
		if af&attemptOwnID != 0 {
			a.ID = d.string()
		}
		a.Number = int(d.varint())
		if af&attemptOwnID == 0 {
			a.ID = jobs.AttemptID(r.ID, a.Number)
		}
		a.Token.Epoch = d.uvarint()
		a.Token.Seq = d.uvarint()
		a.Worker = d.string()
		a.State = jobs.State(d.string())
		a.GrantedAt = d.time()
		a.AcceptedAt = d.time()
		a.StartedAt = d.time()
		a.EndedAt = d.time()
		if af&attemptExitCode != 0 {
			c := int(d.varint())
			a.ExitCode = &c
		}
		a.Signal = d.string()
		a.HTTPStatus = int(d.varint())
		a.ResponseBytes = d.varint()
		a.StoreOutcome = d.string()
		a.StoreVersion = d.uvarint()
		a.Error = d.string()
		a.StderrTail = d.string()
		a.StdoutTail = d.string()
		a.StoreRefusals = d.strings()
		a.Expired = af&attemptExpired != 0
		a.NeverStarted = af&attemptNeverStarted != 0
		a.StartInLog = af&attemptStartInLog != 0
		a.StartConfirmed = af&attemptStartConfirmed != 0
		r.Attempts = append(r.Attempts, a)
	}
	if d.err != nil {
		return runRecord{}, d.err
	}
	if len(d.b) != 0 {
		return runRecord{}, fmt.Errorf("%d bytes left over", len(d.b))
	}
	return runRecord{Index: index, Run: r}, nil
}

func inflate(v []byte) ([]byte, error) {
	zr := readers.Get().(io.ReadCloser)
	defer readers.Put(zr)
	if err := zr.(flate.Resetter).Reset(bytes.NewReader(v), dictV1); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(zr, maxRunBytes+1))
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	if len(b) > maxRunBytes {
		return nil, fmt.Errorf("inflates to more than %d bytes", maxRunBytes)
	}
	return b, nil
}

// keyTime is the scheduled time a run key holds, as the key reads back.
func keyTime(t time.Time) time.Time { return bytesTime(timeBytes(t)) }

// encoder appends a run's fields.
type encoder struct {
	b    []byte
	last time.Time
}

func (e *encoder) uvarint(n uint64) { e.b = binary.AppendUvarint(e.b, n) }
func (e *encoder) varint(n int64)   { e.b = binary.AppendVarint(e.b, n) }

func (e *encoder) string(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

// strings keeps nil and empty apart only as far as JSON did: both were
// omitted (omitempty) and read back nil.
func (e *encoder) strings(ss []string) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.string(s)
	}
}

func (e *encoder) time(t time.Time) {
	switch {
	case t.IsZero():
		// Zero times are omitted from JSON or written as the zero
		// instant, which reads back as the zero Time either way.
		e.uvarint(timeZero)
	case t == time.Unix(0, t.UnixNano()).UTC():
		// == and not Equal: the location and the lack of a monotonic
		// reading must be what a UTC time read back from nanoseconds has.
		e.uvarint(timeDelta)
		e.varint(t.UnixNano() - e.last.UnixNano())
		e.last = t
	default:
		text, err := t.MarshalText()
		if err != nil {
			panic(fmt.Sprintf("history: encode %v: %v", t, err)) // JSON refused it too
		}
		e.uvarint(timeText)
		e.string(string(text))
	}
}

// decoder reads what encoder wrote; the first error sticks and every
// read after it returns zero.
type decoder struct {
	b    []byte
	last time.Time
	err  error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or damaged at %s", what)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	n, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail("a number")
		return 0
	}
	d.b = d.b[k:]
	return n
}

func (d *decoder) varint() int64 {
	n, k := binary.Varint(d.b)
	if k <= 0 {
		d.fail("a number")
		return 0
	}
	d.b = d.b[k:]
	return n
}

// count reads a length, which cannot exceed what is left to read.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("a length")
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.count()
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) strings() []string {
	n := d.count()
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.string()
	}
	return ss
}

func (d *decoder) time() time.Time {
	switch d.uvarint() {
	case timeZero:
		return time.Time{}
	case timeDelta:
		t := time.Unix(0, d.last.UnixNano()+d.varint()).UTC()
		d.last = t
		return t
	case timeText:
		var t time.Time
		if err := t.UnmarshalText([]byte(d.string())); err != nil && d.err == nil {
			d.err = err
		}
		return t
	}
	d.fail("a time")
	return time.Time{}
}

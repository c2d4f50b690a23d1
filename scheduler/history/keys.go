package history

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencecron/fencecron/jobs"
)

// Keys. Every key sorts as what it stands for sorts: big-endian integers,
// times as nanoseconds since 1970 shifted to unsigned, a job name ended
// by a zero byte (names never hold one).
//
//	runs      job 0 time            -> record (a run and the index that archived it; codec.go)
//	bytime    time job 0            -> nothing: runs of every job by scheduled time
//	events    seq                   -> record (an event and the index that archived it)
//	archived  index kind primary    -> nothing: what each entry archived, for gap filling
//	counts    job                   -> how many runs the job has here
//	meta      "through", "gaps"     -> coverage

// timeBytes encodes t so that byte order is time order.
func timeBytes(t time.Time) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(t.UnixNano())^(1<<63))
	return b
}

func bytesTime(b []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(b)^(1<<63))).UTC()
}

func u64(n uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, n)
	return b
}

// jobPrefix is the prefix of a job's keys in the runs bucket.
func jobPrefix(job string) []byte { return append([]byte(job), 0) }

// runKey is a run's key in the runs bucket: unique per (job, scheduled
// time), as the run's id is.
func runKey(job string, scheduled time.Time) []byte {
	return append(jobPrefix(job), timeBytes(scheduled)...)
}

// splitRunKey returns the job and scheduled time of a runs key.
func splitRunKey(k []byte) (string, time.Time, bool) {
	i := bytes.IndexByte(k, 0)
	if i < 0 || len(k) != i+9 {
		return "", time.Time{}, false
	}
	return string(k[:i]), bytesTime(k[i+1:]), true
}

// timeKey is a run's key in the bytime bucket.
func timeKey(job string, scheduled time.Time) []byte {
	return append(timeBytes(scheduled), jobPrefix(job)...)
}

func splitTimeKey(k []byte) (string, time.Time, bool) {
	if len(k) < 10 || k[len(k)-1] != 0 {
		return "", time.Time{}, false
	}
	return string(k[8 : len(k)-1]), bytesTime(k[:8]), true
}

// Kinds of archived record.
const (
	kindRun   byte = 'r'
	kindEvent byte = 'e'
)

// archivedKey names one record archived by the entry at index.
func archivedKey(index uint64, kind byte, primary []byte) []byte {
	k := append(u64(index), kind)
	return append(k, primary...)
}

// runRecord is a run as the history keeps it: the run, and the index of
// the log entry whose trim archived it.
type runRecord struct {
	Index uint64   `json:"index"`
	Run   jobs.Run `json:"run"`
}

type eventRecord struct {
	Index uint64     `json:"index"`
	Event jobs.Event `json:"event"`
}

// Range is the log indexes after From up to and including To.
type Range struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

func (r Range) String() string { return fmt.Sprintf("(%d, %d]", r.From, r.To) }

// overlaps reports whether r and o share an index.
func (r Range) overlaps(o Range) bool { return r.From < o.To && o.From < r.To }

// AddGap returns gaps with g added, merged with the ranges it touches,
// sorted. Pure, so every caller agrees on what the gaps are.
func AddGap(gaps []Range, g Range) []Range {
	if g.To <= g.From {
		return gaps
	}
	out := []Range{}
	for _, r := range gaps {
		if r.To < g.From || g.To < r.From {
			out = append(out, r)
			continue
		}
		g.From, g.To = min(g.From, r.From), max(g.To, r.To)
	}
	out = append(out, g)
	slices.SortFunc(out, func(a, b Range) int { return cmpU(a.From, b.From) })
	return out
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RemoveGap returns gaps without the indexes of g.
func RemoveGap(gaps []Range, g Range) []Range {
	out := []Range{}
	for _, r := range gaps {
		if !r.overlaps(g) {
			out = append(out, r)
			continue
		}
		if r.From < g.From {
			out = append(out, Range{From: r.From, To: g.From})
		}
		if g.To < r.To {
			out = append(out, Range{From: g.To, To: r.To})
		}
	}
	return out
}

// Covered returns the parts of r that a history which has archived
// everything up to through, except the gaps, holds: what it can answer a
// gap filling of r for. Pure, so both ends of a gap filling agree.
func Covered(through uint64, gaps []Range, r Range) []Range {
	if r.To > through {
		r.To = through
	}
	if r.To <= r.From {
		return nil
	}
	out := []Range{r}
	for _, g := range gaps {
		out = RemoveGap(out, g)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Keep returns how many of a job's finished runs to keep, given their
// scheduled times newest first: at most h.Runs, none scheduled before
// now-h.MaxAge. Every server applies it to the runs it holds, and since
// each holds every run (or fills it in from a peer), they keep the same ones.
func Keep(newestFirst []time.Time, h jobs.History, now time.Time) int {
	n := min(len(newestFirst), h.Runs)
	cutoff := now.Add(-h.MaxAge.D())
	for n > 0 && newestFirst[n-1].Before(cutoff) {
		n--
	}
	return n
}

// Expired reports whether a finished run scheduled at t is past h's
// max_age at now.
func Expired(t time.Time, h jobs.History, now time.Time) bool {
	return t.Before(now.Add(-h.MaxAge.D()))
}

// Cursors are opaque to clients: base64 of "<nanoseconds>/<job>" for runs
// (the scheduled time and job of the last run of the page, which name it:
// a job has one run per scheduled time), and of "e<seq>" for events.

// ErrBadCursor: a cursor this node did not make.
var ErrBadCursor = errors.New("bad cursor")

type runCursor struct {
	at  time.Time
	job string
}

func (c runCursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.at.UnixNano(), 10) + "/" + c.job))
}

func decodeRunCursor(s string) (runCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return runCursor{}, ErrBadCursor
	}
	ns, job, ok := strings.Cut(string(b), "/")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || job == "" {
		return runCursor{}, ErrBadCursor
	}
	return runCursor{at: time.Unix(0, n).UTC(), job: job}, nil
}

// before reports whether run r comes after the cursor in newest-first
// order (older scheduled time, or the same time and a smaller job name).
func (c runCursor) before(r jobs.Run) bool {
	if !r.ScheduledAt.Equal(c.at) {
		return r.ScheduledAt.Before(c.at)
	}
	return r.Job < c.job
}

func encodeEventCursor(seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("e" + strconv.FormatUint(seq, 10)))
}

func decodeEventCursor(s string) (uint64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != 'e' {
		return 0, ErrBadCursor
	}
	n, err := strconv.ParseUint(string(b[1:]), 10, 64)
	if err != nil || n == 0 {
		return 0, ErrBadCursor
	}
	return n, nil
}

// newer orders runs newest first: scheduled time, then job name,
// descending; the reverse of the bytime bucket's order, which a listing
// walks, so that a page cut anywhere in it resumes where it was cut.
func newer(a, b jobs.Run) int {
	if c := b.ScheduledAt.Compare(a.ScheduledAt); c != 0 {
		return c
	}
	return strings.Compare(b.Job, a.Job)
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("history: encode: %v", err)) // runs and events are plain data
	}
	return b
}

// recordIndex returns the log index a stored run or event record was
// archived at. Deleting a record needs only that (for its archived key),
// and retention deletes one record for every one it stores, so the index
// is read without decoding the rest: a record stored in formatRunV1,
// formatRunV1Raw or formatEventV1 has it first, never compressed;
// json.Marshal writes a record's fields in order, so every JSON record
// starts {"index":N,. Anything else is decoded in full.
func recordIndex(v []byte) (uint64, error) {
	if len(v) > 0 && (v[0] == formatRunV1 || v[0] == formatRunV1Raw || v[0] == formatEventV1) {
		n, k := binary.Uvarint(v[1:])
		if k <= 0 {
			return 0, errors.New("record: bad index")
		}
		return n, nil
	}
	const head = `{"index":`
	if rest, ok := bytes.CutPrefix(v, []byte(head)); ok {
		if end := bytes.IndexByte(rest, ','); end > 0 {
			if n, err := strconv.ParseUint(string(rest[:end]), 10, 64); err == nil {
				return n, nil
			}
		}
	}
	var rec struct {
		Index uint64 `json:"index"`
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return 0, err
	}
	return rec.Index, nil
}

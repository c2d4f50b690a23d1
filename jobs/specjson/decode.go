// Package specjson reads a list of job specs from the JSON that
// json.Marshal writes for it, several times faster than encoding/json.
//
// A job set travels as that JSON twice on its way in: in the request
// (PUT /api/v1/jobset) and in the Raft entries every replica decodes.
// For 100,000 jobs (some 32 MB) encoding/json spends half a second on
// each: it scans the whole input once to check it, then again as it
// decodes by reflection. Decode reads json.Marshal's own layout (no
// space, Spec's fields in their order, the optional ones absent or
// present) in one pass. Anything else it refuses, and the caller decodes
// with encoding/json as before: what Decode accepts it decodes exactly
// as json.Unmarshal would (its tests hold it to that, and FuzzDecode
// when run with -fuzz), so no replica can read an entry differently for
// having read it faster, and every error a user sees is still
// encoding/json's.
package specjson

import (
	"unicode/utf8"

	"github.com/fencecron/fencecron/jobs"
)

// Decode reads the JSON array of specs at the start of b, as json.Marshal
// writes a []jobs.Spec, appending the specs to into. It returns them, the
// array's length in bytes, and ok false if b does not start with such an
// array: then it decoded nothing the caller should keep, and the specs it
// returns are what it wrote, past into's length, for the caller to clear
// if it reuses the array.
func Decode(b []byte, into []jobs.Spec) (specs []jobs.Spec, n int, ok bool) {
	r := reader{b: b, durs: make(map[string]jobs.Duration)}
	r.lit("[")
	if r.opt("]") {
		if into == nil {
			into = []jobs.Spec{}
		}
		return into, r.i, !r.bad
	}
	for !r.bad {
		into = append(into, jobs.Spec{})
		r.spec(&into[len(into)-1])
		if !r.opt(",") {
			break
		}
	}
	r.lit("]")
	return into, r.i, !r.bad
}

// String reads the JSON string at the start of b as encoding/json reads
// one, returning its length in b; ok is false for one json.Marshal would
// not write (see Decode).
func String(b []byte) (s string, n int, ok bool) {
	r := reader{b: b}
	s = r.str()
	return s, r.i, !r.bad
}

// reader reads b from i; bad records that it met something other than
// json.Marshal's layout, after which every read returns zero values.
type reader struct {
	b    []byte
	i    int
	bad  bool
	durs map[string]jobs.Duration // durations read so far: a set repeats a few
}

// spec reads one spec, its fields in AppendSpec's order.
func (r *reader) spec(s *jobs.Spec) {
	r.lit(`{"name":`)
	s.Name = r.str()
	if r.opt(`,"namespace":`) {
		s.Namespace = r.str()
	}
	r.lit(`,"schedules":`)
	s.Schedules = r.strs()
	if r.opt(`,"timezone":`) {
		s.Timezone = r.str()
	}
	if r.opt(`,"command":`) {
		s.Command = r.strs()
	}
	if r.opt(`,"shell":`) {
		s.Shell = r.str()
	}
	if r.opt(`,"env":`) {
		s.Env = r.strMap()
	}
	if r.opt(`,"dir":`) {
		s.Dir = r.str()
	}
	if r.opt(`,"output":`) {
		s.Output = r.str()
	}
	r.lit(`,"timeout":`)
	s.Timeout = r.dur()
	r.lit(`,"lease_ttl":`)
	s.LeaseTTL = r.dur()
	r.lit(`,"retries":`)
	s.Retries = int(r.int())
	r.lit(`,"backoff":`)
	s.Backoff = r.dur()
	r.lit(`,"overlap":`)
	s.Overlap = r.str()
	r.lit(`,"misfire":`)
	s.Misfire = r.str()
	r.lit(`,"catchup_window":`)
	s.CatchupWindow = r.dur()
	if r.opt(`,"target":`) {
		s.Target = r.strMap()
	}
	r.lit(`,"max_output_bytes":`)
	s.MaxOutputBytes = r.int()
	r.lit(`,"paused":`)
	s.Paused = r.bool()
	if r.opt(`,"jitter":`) {
		s.Jitter = r.dur()
	}
	r.lit(`,"dst":{"spring":`)
	s.DST.Spring = r.str()
	r.lit(`,"fall":`)
	s.DST.Fall = r.str()
	r.lit("}")
	if r.opt(`,"history":{`) {
		runs := r.opt(`"runs":`)
		if runs {
			s.History.Runs = int(r.int())
		}
		if runs && r.opt(`,"max_age":`) || !runs && r.opt(`"max_age":`) {
			s.History.MaxAge = r.dur()
		}
		r.lit("}")
	}
	if r.opt(`,"notify":[`) {
		s.Notify = []jobs.Notify{}
		for !r.bad && !r.opt("]") {
			if len(s.Notify) > 0 {
				r.lit(",")
			}
			s.Notify = append(s.Notify, r.notify())
		}
	}
	if r.opt(`,"after":`) {
		s.After = r.strs()
	}
	if r.opt(`,"http":{"url":`) {
		s.HTTP = r.http()
	}
	if r.opt(`,"group":`) {
		s.Group = r.str()
	}
	if r.opt(`,"group_limits":{"name":`) {
		g := &jobs.Group{Name: r.str()}
		if r.opt(`,"namespace":`) {
			g.Namespace = r.str()
		}
		r.lit(`,"max_running":`)
		g.MaxRunning = int(r.int())
		r.lit(`,"max_waiting":`)
		g.MaxWaiting = int(r.int())
		r.lit("}")
		s.GroupLimits = g
	}
	r.lit("}")
}

// notify reads one of a spec's notifications.
func (r *reader) notify() jobs.Notify {
	var n jobs.Notify
	r.lit(`{"on":`)
	n.On = r.strs()
	if r.opt(`,"webhook":`) {
		n.Webhook = r.str()
	}
	if r.opt(`,"slack":`) {
		n.Slack = r.str()
	}
	if r.opt(`,"email":`) {
		n.Email = r.strs()
	}
	r.lit("}")
	return n
}

// http reads an HTTP job's target, its url's key already read.
func (r *reader) http() *jobs.HTTP {
	h := &jobs.HTTP{URL: r.str()}
	if r.opt(`,"method":`) {
		h.Method = r.str()
	}
	if r.opt(`,"headers":`) {
		h.Headers = r.strMap()
	}
	if r.opt(`,"body":`) {
		h.Body = r.str()
	}
	if r.opt(`,"expect_status":[`) {
		h.ExpectStatus = []int{}
		for !r.bad && !r.opt("]") {
			if len(h.ExpectStatus) > 0 {
				r.lit(",")
			}
			h.ExpectStatus = append(h.ExpectStatus, int(r.int()))
		}
	}
	if r.opt(`,"ca_file":`) {
		h.CAFile = r.str()
	}
	r.lit("}")
	return h
}

// lit reads s.
func (r *reader) lit(s string) {
	if !r.opt(s) {
		r.bad = true
	}
}

// opt reads s if b holds it next, and reports whether it did.
func (r *reader) opt(s string) bool {
	if r.bad || len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

// strs reads a list of strings, or null (a nil list) as encoding/json
// does: [] is an empty list, not a nil one.
func (r *reader) strs() []string {
	if r.opt("null") {
		return nil
	}
	r.lit("[")
	list := []string{}
	for !r.bad && !r.opt("]") {
		if len(list) > 0 {
			r.lit(",")
		}
		list = append(list, r.str())
	}
	return list
}

// strMap reads an object of strings; a key given twice keeps its last
// value, as encoding/json keeps it.
func (r *reader) strMap() map[string]string {
	r.lit("{")
	m := map[string]string{}
	for first := true; !r.bad && !r.opt("}"); first = false {
		if !first {
			r.lit(",")
		}
		k := r.str()
		r.lit(":")
		m[k] = r.str()
	}
	return m
}

// int reads a whole number in int64's range, as encoding/json reads one
// into an int or int64 field: a fraction or exponent is for it to refuse.
func (r *reader) int() int64 {
	if r.bad {
		return 0
	}
	j := r.i
	neg := j < len(r.b) && r.b[j] == '-'
	if neg {
		j++
	}
	start := j
	var u uint64
	for ; j < len(r.b) && '0' <= r.b[j] && r.b[j] <= '9'; j++ {
		if u > (1<<63)/10 {
			r.bad = true
			return 0
		}
		u = u*10 + uint64(r.b[j]-'0')
	}
	digits := j - start
	limit := uint64(1<<63 - 1)
	if neg {
		limit++
	}
	if digits == 0 || digits > 1 && r.b[start] == '0' || u > limit ||
		j < len(r.b) && (r.b[j] == '.' || r.b[j] == 'e' || r.b[j] == 'E') {
		r.bad = true
		return 0
	}
	r.i = j
	if neg {
		return -int64(u) // -(1<<63) wraps to itself
	}
	return int64(u)
}

// bool reads true or false.
func (r *reader) bool() bool {
	if r.opt("true") {
		return true
	}
	r.lit("false")
	return false
}

// dur reads a duration as jobs.Duration's UnmarshalJSON reads a string.
func (r *reader) dur() jobs.Duration {
	start := r.i
	s := r.str()
	if r.bad {
		return 0
	}
	raw := r.b[start:r.i]
	if d, ok := r.durs[string(raw)]; ok {
		return d
	}
	d, err := jobs.ParseDuration(s)
	if err != nil {
		r.bad = true
		return 0
	}
	r.durs[string(raw)] = jobs.Duration(d)
	return jobs.Duration(d)
}

// common holds the values many specs share, so that reading them does
// not allocate a string per spec.
var common = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		jobs.OverlapForbid, jobs.OverlapAllow, jobs.OverlapReplace,
		jobs.MisfireSkip, jobs.MisfireLatest, jobs.MisfireAll,
		jobs.SpringShift, jobs.SpringSkip, jobs.FallOnce, jobs.FallTwice,
		"UTC", "GET", "POST", "PUT",
	} {
		m[s] = s
	}
	return m
}()

// str reads a string as encoding/json unquotes one. What json.Marshal
// writes is valid UTF-8 with a few escapes; a string it would not write
// (invalid UTF-8, an escaped surrogate, a control character) is bad.
func (r *reader) str() string {
	if r.bad || r.i >= len(r.b) || r.b[r.i] != '"' {
		r.bad = true
		return ""
	}
	start := r.i + 1
	ascii := true
	for j := start; j < len(r.b); j++ {
		c := r.b[j]
		switch {
		case c == '\\':
			return r.escaped(start)
		case c < 0x20:
			r.bad = true
			return ""
		case c >= utf8.RuneSelf:
			ascii = false
		}
		if c != '"' {
			continue
		}
		raw := r.b[start:j]
		if !ascii && !utf8.Valid(raw) {
			break
		}
		r.i = j + 1
		if s, ok := common[string(raw)]; ok {
			return s
		}
		return string(raw)
	}
	r.bad = true
	return ""
}

// escaped reads the string that starts at b[start] and has an escape.
func (r *reader) escaped(start int) string {
	out := make([]byte, 0, 64)
	j := start
	for j < len(r.b) {
		c := r.b[j]
		switch {
		case c == '"':
			if !utf8.Valid(out) {
				r.bad = true
				return ""
			}
			r.i = j + 1
			return string(out)
		case c < 0x20:
			r.bad = true
			return ""
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(r.b) {
			break
		}
		switch e := r.b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			rn, ok := hex4(r.b[j+2:])
			if !ok || utf8.RuneLen(rn) < 0 { // a surrogate: left to encoding/json
				r.bad = true
				return ""
			}
			out = utf8.AppendRune(out, rn)
			j += 4
		default:
			r.bad = true
			return ""
		}
		j += 2
	}
	r.bad = true
	return ""
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var v rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	return v, true
}

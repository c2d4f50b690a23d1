package specjson

import (
	"slices"

	"github.com/fencecron/fencecron/jobs"
)

// Stream decodes, as Decode does, a JSON array of specs that arrives in
// pieces: each spec is decoded as soon as its JSON is whole, so that a
// job set can be decoded while the rest of it is still being received,
// and its JSON need not be held whole.
type Stream struct {
	specs []jobs.Spec
	want  int // the list's capacity once it is full
	durs  map[string]jobs.Duration
	state streamState
}

type streamState int

const (
	wantOpen  streamState = iota // the array's "["
	wantFirst                    // its first spec, or "]"
	wantSpec                     // a spec, after a ","
	wantNext                     // a "," or the closing "]"
	ended                        // the array is read
	refused                      // what Decode would refuse
)

// NewStream returns a Stream that appends the specs it decodes to into;
// once into is full, the list grows to want specs at once (if more), and
// from there as append grows it.
func NewStream(into []jobs.Spec, want int) *Stream {
	return &Stream{specs: into, want: want, durs: make(map[string]jobs.Duration)}
}

// Feed decodes what of b it can: the array's "[", each spec whose JSON
// b holds to its end, the commas between them and the closing "]". It
// returns how many bytes of b it used: the caller gives the rest again,
// followed by what arrives next. done reports that the array ended (at
// b[n-1]); ok false, that b holds what Decode would refuse, after which
// nothing the Stream decoded is to be kept.
func (s *Stream) Feed(b []byte) (n int, done, ok bool) {
	for s.state != ended && s.state != refused && n < len(b) {
		switch c := b[n]; s.state {
		case wantOpen:
			s.expect(c == '[', wantFirst)
			n++
		case wantFirst, wantSpec:
			if s.state == wantFirst && c == ']' {
				s.state = ended
				n++
				continue
			}
			if c != '{' {
				s.state = refused
				continue
			}
			size := objectLen(b[n:])
			if size < 0 {
				return n, false, true // the spec is not whole yet
			}
			r := reader{b: b[n : n+size], durs: s.durs}
			if len(s.specs) == cap(s.specs) && s.want > cap(s.specs) {
				s.specs = slices.Grow(s.specs, s.want-len(s.specs))
			}
			s.specs = append(s.specs, jobs.Spec{})
			r.spec(&s.specs[len(s.specs)-1])
			s.expect(!r.bad && r.i == size, wantNext)
			n += size
		case wantNext:
			switch c {
			case ',':
				s.state = wantSpec
			case ']':
				s.state = ended
			default:
				s.state = refused
			}
			n++
		}
	}
	return n, s.state == ended, s.state != refused
}

// Specs returns the specs decoded, once Feed has said the array ended:
// an empty array is a non-nil list, as Decode returns it.
func (s *Stream) Specs() []jobs.Spec {
	if s.specs == nil {
		return []jobs.Spec{}
	}
	return s.specs
}

func (s *Stream) expect(ok bool, next streamState) {
	if ok {
		s.state = next
	} else {
		s.state = refused
	}
}

// objectLen returns the length of the JSON object at the start of b (at
// its "{"), or -1 if b does not hold it to its end. It counts brackets
// outside strings and checks nothing else: the spec's reader does.
func objectLen(b []byte) int {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

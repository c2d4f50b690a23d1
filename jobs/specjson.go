package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// A job set arrives as JSON twice on its way in: in the body of PUT
// /api/v1/jobset, and in the Raft entry every replica (the leader too)
// decodes. 100,000 specs take a second each time on one core; the specs
// are independent, so these types decode them on every core.

// SpecList is a job set that decodes from a JSON array on every core, as
// json.Unmarshal would decode a []Spec (unknown fields ignored). It
// encodes as a []Spec does (with encoding/json's reflection: a
// MarshalJSON of its own would have its output checked and compacted
// once more, which costs more than it saves).
type SpecList []Spec

// UnmarshalJSON decodes a JSON array of specs, or null (a nil set).
func (l *SpecList) UnmarshalJSON(b []byte) error {
	specs, err := decodeSpecs(b, false)
	if err != nil {
		return err
	}
	*l = specs
	return nil
}

// StrictSpecList is a SpecList that refuses unknown fields, as a
// json.Decoder with DisallowUnknownFields does: the request of a client
// that misspelled a field is refused rather than half-read.
type StrictSpecList []Spec

// UnmarshalJSON decodes a JSON array of specs, or null (a nil set),
// refusing a field Spec does not have.
func (l *StrictSpecList) UnmarshalJSON(b []byte) error {
	specs, err := decodeSpecs(b, true)
	if err != nil {
		return err
	}
	*l = specs
	return nil
}

// decodeSpecs decodes b, valid JSON (encoding/json checks a value
// before it hands it to an UnmarshalJSON), as a list of specs: it finds
// where each element starts and ends, then decodes the elements on every
// core. The first error in the list's order is returned.
func decodeSpecs(b []byte, strict bool) ([]Spec, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil, nil
	}
	elems, ok := splitArray(b)
	if !ok {
		return nil, fmt.Errorf("json: cannot unmarshal %s into a list of jobs", clipJSON(b))
	}
	specs := make([]Spec, len(elems))
	errs := make([]error, len(elems))
	inParallel(len(elems), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if strict {
				dec := json.NewDecoder(bytes.NewReader(elems[i]))
				dec.DisallowUnknownFields()
				errs[i] = dec.Decode(&specs[i])
			} else {
				errs[i] = json.Unmarshal(elems[i], &specs[i])
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("job %d of the list: %w", i+1, err)
		}
	}
	return specs, nil
}

// splitArray returns the elements of b, a valid JSON array; ok is false
// if b is not an array.
func splitArray(b []byte) (elems [][]byte, ok bool) {
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, false
	}
	elems = make([][]byte, 0, bytes.Count(b, []byte(`"name"`)))
	depth, start, inString := 0, -1, false
	for i := 1; i < len(b)-1; i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped character, even a quote
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case ',':
			if depth == 0 {
				elems = append(elems, b[start:i])
				start = -1
				continue
			}
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		elems = append(elems, b[start:len(b)-1])
	}
	return elems, true
}

// clipJSON returns the start of b, for an error message.
func clipJSON(b []byte) string {
	if len(b) > 20 {
		return string(b[:20]) + "..."
	}
	return string(b)
}

package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"unicode/utf8"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/specjson"
)

// DecodeJobSetDigests decodes the body of PUT /api/v1/jobset/digests as a
// json.Decoder that refuses unknown fields decodes it. A node reads one
// for every apply by digest, with 100,000 names and digests in it, and
// encoding/json's reading (a scan of the whole body, then its reflection)
// was a sixth of the node's work for a one-job change. So a body as
// json.Marshal writes one (no spaces, the fields in order, no escapes in
// the source, names and digests) is read here directly, its specs by
// encoding/json; any other by encoding/json.
func DecodeJobSetDigests(body []byte) (JobSetDigests, error) {
	if req, ok := plainJobSetDigests(body); ok {
		return req, nil
	}
	var req JobSetDigests
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	return req, err
}

// AppendJobSetDigests appends req as json.Marshal writes it, byte for
// byte: the shape DecodeJobSetDigests reads directly. A command sends one
// with 100,000 names and digests for a one-job change, which
// encoding/json's reflection took an eighth of the command's work to
// write.
func AppendJobSetDigests(b []byte, req JobSetDigests) ([]byte, error) {
	size := len(req.Source) + 64
	for _, d := range req.Jobs {
		size += len(d.Name) + len(d.Digest) + len(`{"name":"","digest":""},`)
	}
	b = slices.Grow(b, size)
	b = append(b, `{"source":`...)
	b = jobs.AppendJSONString(b, req.Source)
	b = append(b, `,"jobs":`...)
	if req.Jobs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, d := range req.Jobs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = jobs.AppendJSONString(b, d.Name)
			b = append(b, `,"digest":`...)
			b = jobs.AppendJSONString(b, d.Digest)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(req.Specs) > 0 {
		specs, err := json.Marshal(req.Specs)
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"specs":`...), specs...)
	}
	return append(b, '}'), nil
}

// plainJobSetDigests reads body if it is of the plain shape
// DecodeJobSetDigests reads directly, or returns false.
func plainJobSetDigests(body []byte) (req JobSetDigests, ok bool) {
	var rest []byte
	if req.Source, rest, ok = plainSourceThenJobs(body); !ok {
		return req, false
	}
	if bytes.HasPrefix(rest, []byte("null")) {
		rest = rest[len("null"):]
	} else if req.Jobs, rest, ok = plainJobDigests(rest); !ok {
		return req, false
	}
	if specs, more := bytes.CutPrefix(rest, []byte(`,"specs":`)); more && len(specs) > 0 && specs[len(specs)-1] == '}' {
		var list specjson.StrictList
		if err := strictOne(specs[:len(specs)-1], &list); err != nil {
			return req, false // encoding/json says what is wrong with it
		}
		req.Specs, rest = list, rest[len(rest)-1:]
	}
	return req, string(rest) == "}"
}

// plainSourceThenJobs reads the start both job set bodies share, as
// json.Marshal writes it: {"source":"...","jobs": with a source that
// needs no unescaping. It returns the source and what follows, the jobs'
// value and the rest of body (trailing spaces trimmed).
func plainSourceThenJobs(body []byte) (source string, rest []byte, ok bool) {
	rest = bytes.TrimRight(body, " \t\r\n")
	if rest, ok = bytes.CutPrefix(rest, []byte(`{"source":"`)); !ok {
		return "", nil, false
	}
	if source, rest, ok = plainString(rest); !ok {
		return "", nil, false
	}
	rest, ok = bytes.CutPrefix(rest, []byte(`,"jobs":`))
	return source, rest, ok
}

// plainJobDigests reads a list of JobDigest as json.Marshal writes one,
// whose strings need no unescaping, at the start of b: the list, and what
// follows it.
func plainJobDigests(b []byte) ([]JobDigest, []byte, bool) {
	const name, digest = `{"name":"`, `,"digest":"`
	rest, ok := bytes.CutPrefix(b, []byte("["))
	if !ok {
		return nil, nil, false
	}
	list := make([]JobDigest, 0, bytes.Count(b, []byte(name)))
	for len(rest) > 0 && rest[0] != ']' {
		if len(list) > 0 {
			if rest, ok = bytes.CutPrefix(rest, []byte(",")); !ok {
				return nil, nil, false
			}
		}
		var d JobDigest
		if rest, ok = bytes.CutPrefix(rest, []byte(name)); !ok {
			return nil, nil, false
		}
		if d.Name, rest, ok = plainString(rest); !ok {
			return nil, nil, false
		}
		if rest, ok = bytes.CutPrefix(rest, []byte(digest)); !ok {
			return nil, nil, false
		}
		if d.Digest, rest, ok = plainString(rest); !ok {
			return nil, nil, false
		}
		if rest, ok = bytes.CutPrefix(rest, []byte("}")); !ok {
			return nil, nil, false
		}
		list = append(list, d)
	}
	if len(rest) == 0 {
		return nil, nil, false
	}
	return list, rest[1:], true
}

// plainString reads a string's text up to its closing quote, which must
// hold no escape, control character or invalid UTF-8 (which encoding/json
// would turn into U+FFFD), and returns it and what follows the quote.
func plainString(b []byte) (string, []byte, bool) {
	end := bytes.IndexByte(b, '"')
	if end < 0 {
		return "", nil, false
	}
	s := b[:end]
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return "", nil, false
		}
	}
	if !utf8.Valid(s) {
		return "", nil, false
	}
	return string(s), b[end+1:], true
}

// strictOne decodes b, which must be one JSON value, into v.
func strictOne(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one value")
	}
	return nil
}

package replicated

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/specjson"
)

// EncodeCommand encodes c as json.Marshal encodes it, byte for byte. A
// set_jobs_diff entry's specs, a megabyte of them in each part of a large
// set, are written by jobs.AppendSpec rather than by encoding/json's
// reflection, which took a tenth of a node's work to apply 100,000 jobs.
func EncodeCommand(c Command) ([]byte, error) {
	d := c.SetJobsDiff
	if c.Op != OpSetJobsDiff || d == nil || (Command{V: c.V, Op: c.Op, SetJobsDiff: d}) != c {
		return json.Marshal(c)
	}
	at, err := d.At.MarshalJSON()
	if err != nil {
		return json.Marshal(c) // json.Marshal's own error
	}
	size := 256 + len(d.Base) + len(d.Hash) + len(d.Source) + 512*len(d.Upsert)
	for _, name := range d.Remove {
		size += len(name) + 3
	}
	b := make([]byte, 0, size)
	b = append(b, '{')
	if c.V != 0 {
		b = append(strconv.AppendInt(append(b, `"v":`...), int64(c.V), 10), ',')
	}
	b = append(b, `"op":"`+OpSetJobsDiff+`","`+OpSetJobsDiff+`":{"base":`...)
	b = jobs.AppendJSONString(b, d.Base)
	if len(d.Upsert) > 0 {
		b = append(b, `,"upsert":[`...)
		for i := range d.Upsert {
			if i > 0 {
				b = append(b, ',')
			}
			b = jobs.AppendSpec(b, &d.Upsert[i])
		}
		b = append(b, ']')
	}
	if len(d.Remove) > 0 {
		b = append(b, `,"remove":[`...)
		for i, name := range d.Remove {
			if i > 0 {
				b = append(b, ',')
			}
			b = jobs.AppendJSONString(b, name)
		}
		b = append(b, ']')
	}
	b = jobs.AppendJSONString(append(b, `,"hash":`...), d.Hash)
	b = jobs.AppendJSONString(append(b, `,"source":`...), d.Source)
	b = append(append(b, `,"at":`...), at...)
	if d.Part != 0 {
		b = strconv.AppendInt(append(b, `,"part":`...), int64(d.Part), 10)
	}
	if d.Parts != 0 {
		b = strconv.AppendInt(append(b, `,"parts":`...), int64(d.Parts), 10)
	}
	return append(b, "}}"...), nil
}

// DecodeCommand decodes an entry as json.Unmarshal decodes it into a
// Command. A job set of 100,000 jobs reaches every replica as some thirty
// set_jobs_diff entries of a megabyte of specs each, which encoding/json
// took half a second to read; so the specs of such an entry, in the
// layout EncodeCommand (json.Marshal's) gives them, are read by specjson,
// and the rest of the entry, without them, by encoding/json. Anything
// that is not plainly that layout is decoded whole by encoding/json, so
// every replica reads every entry as encoding/json reads it.
func DecodeCommand(data []byte) (Command, error) {
	if c, ok := decodeSetJobsDiff(data); ok {
		return c, nil
	}
	var c Command
	err := json.Unmarshal(data, &c)
	return c, err
}

// decodeSetJobsDiff decodes a set_jobs_diff entry whose Upsert specjson
// reads, or returns false.
func decodeSetJobsDiff(data []byte) (Command, bool) {
	var c Command
	rest, ok := bytes.CutPrefix(data, []byte(`{"v":`))
	if !ok {
		return c, false
	}
	rest = bytes.TrimLeft(rest, "0123456789")
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"op":"`+OpSetJobsDiff+`","`+OpSetJobsDiff+`":{"base":"`)); !ok {
		return c, false
	}
	// The base's end: its closing quote, unless it holds an escape.
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return c, false
	}
	if rest, ok = bytes.CutPrefix(rest[end+1:], []byte(`,"upsert":`)); !ok {
		return c, false
	}
	specs, n, ok := specjson.Decode(rest, make([]jobs.Spec, 0, jobs.CountSpecs(rest)))
	if !ok {
		return c, false
	}
	// The rest is decoded with the specs as an empty list, and they are
	// put in its place. That is what decoding the entry whole gives,
	// unless what follows them changes the list or the payload holding
	// it. encoding/json matches keys regardless of case (and folds ſ to
	// s, K to k), and the last of two keys wins: the rest must not name
	// upsert again, in any spelling; and the list must still be the
	// empty one spliced in, not nil, which a later "set_jobs_diff":null
	// or a new payload object would leave.
	tail := rest[n:]
	for _, b := range tail {
		if b >= 0x80 || b == '\\' {
			return c, false
		}
	}
	if bytes.Contains(bytes.ToLower(tail), []byte("upsert")) {
		return c, false
	}
	without := slices.Concat(data[:len(data)-len(rest)], []byte("[]"), tail)
	if err := json.Unmarshal(without, &c); err != nil || c.SetJobsDiff == nil || c.SetJobsDiff.Upsert == nil || len(c.SetJobsDiff.Upsert) != 0 {
		return Command{}, false
	}
	c.SetJobsDiff.Upsert = specs
	return c, true
}

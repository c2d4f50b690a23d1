package specjson

import (
	"bytes"
	"encoding/json"

	"github.com/fencecron/fencecron/jobs"
)

// A job set arrives as JSON twice on its way in: in a request (PUT
// /api/v1/jobset, or a follower forwarding one), and in the Raft entry
// every replica (the leader too) decodes. Decoded into a nil []Spec, a
// list of 100,000 specs is grown by doubling, each time copying what it
// holds (some 80 MiB moved, and up to twice the memory the set needs);
// these types allocate it once, at the size the JSON shows, and read a
// list in json.Marshal's layout with Decode. As fields of a larger value
// they still cost encoding/json's scans of the whole (which is why the
// web handler, the FSM and the leader taking a forwarded apply cut the
// list out of the JSON themselves: wire.DecodeJobSetRequest,
// replicated.DecodeCommand, and scheduler/rpc's decodeBody).

// List is a job set that decodes as json.Unmarshal decodes a []Spec
// (unknown fields ignored), into a slice allocated once. It encodes as a
// []Spec does.
type List []jobs.Spec

// UnmarshalJSON decodes a JSON array of specs, or null (a nil set).
func (l *List) UnmarshalJSON(b []byte) error {
	specs, err := decodeList(b, false)
	if err != nil {
		return err
	}
	*l = specs
	return nil
}

// StrictList is a List that refuses unknown fields, as a json.Decoder
// with DisallowUnknownFields does (the option does not reach into a
// field's own UnmarshalJSON, so this one sets it again).
type StrictList []jobs.Spec

// UnmarshalJSON decodes a JSON array of specs, or null (a nil set),
// refusing a field Spec does not have.
func (l *StrictList) UnmarshalJSON(b []byte) error {
	specs, err := decodeList(b, true)
	if err != nil {
		return err
	}
	*l = specs
	return nil
}

// decodeList decodes b, one JSON value, as a []jobs.Spec allocated once:
// by Decode if it reads b whole (it knows no unknown field), else by
// encoding/json, refusing unknown fields if strict.
func decodeList(b []byte, strict bool) ([]jobs.Spec, error) {
	specs := make([]jobs.Spec, 0, jobs.CountSpecs(b))
	got, n, ok := Decode(b, specs)
	if ok && n == len(b) {
		return got, nil
	}
	// encoding/json decodes into the same list, cleared of what Decode
	// wrote in it (encoding/json does not clear an element it reuses).
	clear(specs[:min(len(got), cap(specs))])
	if !strict {
		err := json.Unmarshal(b, &specs)
		return specs, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(&specs)
	return specs, err
}

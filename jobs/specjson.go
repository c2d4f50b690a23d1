package jobs

import (
	"bytes"
	"encoding/json"
)

// A job set arrives as JSON twice on its way in: in a request (PUT
// /api/v1/jobset, or a follower forwarding one), and in the Raft entry
// every replica (the leader too) decodes. Decoded into a nil []Spec, a
// list of 100,000 specs is grown by doubling, each time copying what it
// holds (some 80 MiB moved, and up to twice the memory the set needs);
// these types allocate it once, at the size the JSON shows. They cost one
// more scan of the JSON than a plain []Spec, which is why the web handler,
// holding the whole body, sizes its []Spec itself (CountSpecs) instead.

// SpecList is a job set that decodes as json.Unmarshal decodes a []Spec
// (unknown fields ignored), into a slice allocated once. It encodes as a
// []Spec does.
type SpecList []Spec

// UnmarshalJSON decodes a JSON array of specs, or null (a nil set).
func (l *SpecList) UnmarshalJSON(b []byte) error {
	specs := make([]Spec, 0, CountSpecs(b))
	if err := json.Unmarshal(b, &specs); err != nil {
		return err
	}
	*l = specs
	return nil
}

// StrictSpecList is a SpecList that refuses unknown fields, as a
// json.Decoder with DisallowUnknownFields does (the option does not reach
// into a field's own UnmarshalJSON, so this one sets it again).
type StrictSpecList []Spec

// UnmarshalJSON decodes a JSON array of specs, or null (a nil set),
// refusing a field Spec does not have.
func (l *StrictSpecList) UnmarshalJSON(b []byte) error {
	specs := make([]Spec, 0, CountSpecs(b))
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&specs); err != nil {
		return err
	}
	*l = specs
	return nil
}

// CountSpecs returns at least how many specs the JSON b holds (each has
// a name), bounded by MaxJobs (a longer list is refused whatever its
// capacity): the capacity to decode a job set into.
func CountSpecs(b []byte) int {
	return min(bytes.Count(b, []byte(`"name"`)), MaxJobs)
}

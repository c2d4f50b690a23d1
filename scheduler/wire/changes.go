package wire

import (
	"slices"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/specjson"
)

// JobSetChanges is the body of PUT /api/v1/jobset/changes: a job set
// given as what changed since the set of hash Base, which the last apply
// of the same file made: the specs of the jobs added or changed, and the
// names of the jobs removed. The node applies it only to the set Base
// names; `fencecron apply` then sends a one-job change among 100,000 as
// one spec, where PUT /api/v1/jobset/digests sends 100,000 names and
// digests with it.
type JobSetChanges struct {
	Source string      `json:"source"`
	Base   string      `json:"base"`
	Specs  []jobs.Spec `json:"specs"`
	Remove []string    `json:"remove"`
}

// JobSetChangesAnswer is the answer of PUT /api/v1/jobset/changes: the
// set applied, or the hash of the node's set (Set), which is not the
// request's base: nothing was applied.
type JobSetChangesAnswer struct {
	Applied *JobSetApplied `json:"applied,omitempty"`
	Set     string         `json:"set,omitempty"`
}

// DecodeJobSetChanges decodes the body of PUT /api/v1/jobset/changes as a
// json.Decoder that refuses unknown fields decodes it, its specs read as
// specjson.StrictList reads them.
func DecodeJobSetChanges(body []byte) (JobSetChanges, error) {
	var req struct {
		Source string              `json:"source"`
		Base   string              `json:"base"`
		Specs  specjson.StrictList `json:"specs"`
		Remove []string            `json:"remove"`
	}
	err := strictOne(body, &req)
	return JobSetChanges{Source: req.Source, Base: req.Base, Specs: req.Specs, Remove: req.Remove}, err
}

// AppendJobSetChanges appends req as json.Marshal writes it, its specs
// by jobs.AppendSpec: a file whose edit changed thousands of jobs sends
// them all in it.
func AppendJobSetChanges(b []byte, req JobSetChanges) []byte {
	b = slices.Grow(b, 64+len(req.Source)+len(req.Base)+512*len(req.Specs)+32*len(req.Remove))
	b = append(b, `{"source":`...)
	b = jobs.AppendJSONString(b, req.Source)
	b = append(b, `,"base":`...)
	b = jobs.AppendJSONString(b, req.Base)
	b = append(b, `,"specs":`...)
	if req.Specs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range req.Specs {
			if i > 0 {
				b = append(b, ',')
			}
			b = jobs.AppendSpec(b, &req.Specs[i])
		}
		b = append(b, ']')
	}
	b = append(b, `,"remove":`...)
	if req.Remove == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, name := range req.Remove {
			if i > 0 {
				b = append(b, ',')
			}
			b = jobs.AppendJSONString(b, name)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

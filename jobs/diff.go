package jobs

import (
	"bytes"
	"encoding/json"
	"slices"
)

// SetDiff is what applying a job set would change: the jobs it adds and
// removes, by name, and the jobs whose spec differs, field by field.
type SetDiff struct {
	Added   []string    `json:"added"`
	Removed []string    `json:"removed"`
	Changed []JobChange `json:"changed"`
}

// JobChange is one job's changed fields.
type JobChange struct {
	Name   string        `json:"name"`
	Fields []FieldChange `json:"fields"`
}

// FieldChange is one field of a spec, by its config name, with its old
// and new values as JSON text ("" when absent). Encoded as JSON, the
// values are themselves, not strings holding JSON: {"old": "20s"}, and
// null when absent.
type FieldChange struct {
	Field string `json:"field"`
	Old   string `json:"old"`
	New   string `json:"new"`
}

// MarshalJSON writes Old and New as the JSON values they hold.
func (f FieldChange) MarshalJSON() ([]byte, error) {
	raw := func(s string) json.RawMessage {
		if s == "" || !json.Valid([]byte(s)) {
			return json.RawMessage("null")
		}
		return json.RawMessage(s)
	}
	return json.Marshal(struct {
		Field string          `json:"field"`
		Old   json.RawMessage `json:"old"`
		New   json.RawMessage `json:"new"`
	}{f.Field, raw(f.Old), raw(f.New)})
}

// Empty reports whether applying would change nothing.
func (d SetDiff) Empty() bool { return len(d.Added)+len(d.Removed)+len(d.Changed) == 0 }

// DiffSets compares the job set old (as applied) with new (about to be
// applied). Both are normalized first, so a default written out and one
// left implicit compare equal. Names are listed in new's order (removed
// ones in old's), fields in the order of the spec's JSON names.
func DiffSets(old, new []Spec) SetDiff {
	d := SetDiff{Added: []string{}, Removed: []string{}, Changed: []JobChange{}}
	before := make(map[string]Spec, len(old))
	for _, s := range old {
		before[s.Name] = s
	}
	inNew := make(map[string]bool, len(new))
	for _, s := range new {
		inNew[s.Name] = true
		o, ok := before[s.Name]
		if !ok {
			d.Added = append(d.Added, s.Name)
			continue
		}
		if fs := diffSpec(o, s); len(fs) > 0 {
			d.Changed = append(d.Changed, JobChange{Name: s.Name, Fields: fs})
		}
	}
	for _, s := range old {
		if !inNew[s.Name] {
			d.Removed = append(d.Removed, s.Name)
		}
	}
	return d
}

// diffSpec compares two specs by their JSON fields. Specs whose JSON is
// the same have no field that differs, and are told apart from the rest
// by that alone: a dry run of one change among 100,000 jobs compares
// 99,999 equal pairs, and splitting each into fields cost most of it.
func diffSpec(a, b Spec) []FieldChange {
	a.Normalize()
	b.Normalize()
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA == nil && errB == nil && bytes.Equal(ja, jb) {
		return nil
	}
	fa, fb := specFields(ja), specFields(jb)
	var keys []string
	for k := range fa {
		keys = append(keys, k)
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []FieldChange
	for _, k := range keys {
		if !bytes.Equal(fa[k], fb[k]) {
			out = append(out, fieldChange(k, fa[k], fb[k]))
		}
	}
	return out
}

// fieldChange is the change of field k from a to b. A job of one schedule
// is written `schedule: EXPR` (the spec keeps it as a list of one): its
// change is told that way, by the name the file uses.
func fieldChange(k string, a, b json.RawMessage) FieldChange {
	if k == "schedules" {
		var sa, sb []string
		if json.Unmarshal(a, &sa) == nil && json.Unmarshal(b, &sb) == nil && len(sa) <= 1 && len(sb) <= 1 {
			one := func(s []string) string {
				if len(s) == 0 {
					return ""
				}
				v, _ := json.Marshal(s[0])
				return string(v)
			}
			return FieldChange{Field: "schedule", Old: one(sa), New: one(sb)}
		}
	}
	return FieldChange{Field: k, Old: string(a), New: string(b)}
}

// specFields is a spec's JSON, b, field by field, each value compact.
func specFields(b []byte) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	for k, v := range m {
		var c bytes.Buffer
		if json.Compact(&c, v) == nil {
			m[k] = c.Bytes()
		}
	}
	return m
}

package jobs

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

func TestDiffSets(t *testing.T) {
	old := []Spec{
		{Name: "a", Schedules: []string{"@daily"}, Shell: "true"},
		{Name: "b", Schedules: []string{"@daily"}, Shell: "true", Timeout: Duration(DefaultTimeout)},
		{Name: "c", Schedules: []string{"@hourly"}, Shell: "true"},
	}
	new := []Spec{
		{Name: "b", Schedules: []string{"@daily"}, Shell: "true"}, // a default left implicit: no change
		{Name: "c", Schedules: []string{"0 * * * *"}, Shell: "true", Overlap: OverlapAllow},
		{Name: "d", Schedules: []string{"@daily"}, Shell: "true"},
	}
	d := DiffSets(old, new)
	if !slices.Equal(d.Added, []string{"d"}) || !slices.Equal(d.Removed, []string{"a"}) {
		t.Errorf("added %v removed %v, want [d] and [a]", d.Added, d.Removed)
	}
	if len(d.Changed) != 1 || d.Changed[0].Name != "c" {
		t.Fatalf("changed = %+v, want c only", d.Changed)
	}
	want := []FieldChange{{"overlap", `"forbid"`, `"allow"`}, {"schedule", `"@hourly"`, `"0 * * * *"`}}
	if got := d.Changed[0].Fields; !slices.Equal(got, want) {
		t.Errorf("fields = %+v, want %+v", got, want)
	}
	if d.Empty() || !DiffSets(old, old).Empty() {
		t.Error("Empty wrong")
	}
}

// A job with several schedules changes its schedules; as JSON, a change's
// values are JSON values, not strings that hold JSON.
func TestDiffSets_SchedulesAndJSON(t *testing.T) {
	old := []Spec{{Name: "a", Schedules: []string{"@daily"}, Shell: "true", Timeout: Duration(20 * time.Second)}}
	new := []Spec{{Name: "a", Schedules: []string{"@daily", "@hourly"}, Shell: "true"}}
	d := DiffSets(old, new)
	if len(d.Changed) != 1 {
		t.Fatalf("changed = %+v", d.Changed)
	}
	want := []FieldChange{{"schedules", `["@daily"]`, `["@daily","@hourly"]`}, {"timeout", `"20s"`, `"10m0s"`}}
	if got := d.Changed[0].Fields; !slices.Equal(got, want) {
		t.Errorf("fields = %+v, want %+v", got, want)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"added":[],"removed":[],"changed":[{"name":"a","fields":[{"field":"schedules","old":["@daily"],"new":["@daily","@hourly"]},{"field":"timeout","old":"20s","new":"10m0s"}]}]}`; got != want {
		t.Errorf("JSON:\n%s\nwant\n%s", got, want)
	}
	if b, _ := json.Marshal(FieldChange{Field: "target", New: `{"zone":"a"}`}); string(b) != `{"field":"target","old":null,"new":{"zone":"a"}}` {
		t.Errorf("absent value: %s", b)
	}
}

package jobs

import (
	"slices"
	"testing"
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
	want := []FieldChange{{"overlap", `"forbid"`, `"allow"`}, {"schedules", `["@hourly"]`, `["0 * * * *"]`}}
	if got := d.Changed[0].Fields; !slices.Equal(got, want) {
		t.Errorf("fields = %+v, want %+v", got, want)
	}
	if d.Empty() || !DiffSets(old, old).Empty() {
		t.Error("Empty wrong")
	}
}

package web

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/fencecron/fencecron/scheduler/wire"
)

// Changes name jobs as the set names them, however they are written (a
// namespace as a field, the default namespace spelled out), whichever
// way the node applies them; changes against another set apply nothing
// and say what the set is.
func TestJobSetChanges_NamedAsTheSet(t *testing.T) {
	f := newFixture(t)
	body := `{"source":"t","base":"abc","specs":[{"name":"y","namespace":"team-a","schedules":["@daily"],"command":["/bin/true"]}],"remove":["default:heartbeat"]}`
	code, _, out := f.do(t, "PUT", "/api/v1/jobset/changes", body, "Content-Type", "application/json")
	var ans wire.JobSetChangesAnswer
	if err := json.Unmarshal([]byte(out), &ans); code != 200 || err != nil || ans.Applied == nil {
		t.Fatalf("changes: %d %s", code, out)
	}
	var names []string
	for _, s := range f.sched.lastSet {
		names = append(names, s.Name)
	}
	if want := []string{"report", "team-a:y"}; !slices.Equal(names, want) {
		t.Errorf("the set applied names %v, want %v", names, want)
	}

	f.sched.lastSet = nil
	code, _, out = f.do(t, "PUT", "/api/v1/jobset/changes", `{"source":"t","base":"0123456789abcdef","specs":[],"remove":["report"]}`, "Content-Type", "application/json")
	ans = wire.JobSetChangesAnswer{}
	if err := json.Unmarshal([]byte(out), &ans); code != 200 || err != nil || ans.Applied != nil || ans.Set != "abc" || f.sched.lastSet != nil {
		t.Errorf("changes against another set: %d %s; want nothing applied and the set's hash", code, out)
	}
}

package fsm

import (
	"testing"

	"github.com/fencecron/fencecron/scheduler/replicated"
)

// TestOpTable: every op is declared whole: a name, a version this binary
// reads, a payload check that refuses an entry without the payload, and
// the function that applies it.
func TestOpTable(t *testing.T) {
	if len(opsByName) != len(opTable) {
		t.Fatalf("%d ops by name, %d in the table", len(opsByName), len(opTable))
	}
	for _, o := range opTable {
		switch {
		case o.name == "" || o.since < 1 || o.since > replicated.LogVersion:
			t.Errorf("op %q: since version %d; want 1 to %d", o.name, o.since, replicated.LogVersion)
		case o.has == nil || o.apply == nil:
			t.Errorf("op %q: no payload check or no apply", o.name)
		case o.has(&replicated.Command{Op: o.name}):
			t.Errorf("op %q: an entry without its payload passes the payload check", o.name)
		}
	}
}

package election

import (
	"testing"
	"time"
)

func TestUseNewSecret(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	member := func(state string, secrets ...string) Member {
		return Member{Name: state, State: state, Since: now.Add(-time.Hour), Meta: Meta{Secrets: secrets}}
	}
	longDead := member("dead", "old")
	longDead.Since = now.Add(-73 * time.Hour)
	for _, tc := range []struct {
		name    string
		members []Member
		want    bool
	}{
		{"every member holds both", []Member{member("alive", "new", "old"), member("alive", "new", "old")}, true},
		{"one member holds only the old", []Member{member("alive", "new", "old"), member("alive", "old")}, false},
		{"a suspect member still counts", []Member{member("alive", "new"), member("suspect", "old")}, false},
		{"a crashed member may come back as it was", []Member{member("alive", "new"), member("dead", "old")}, false},
		{"one dead for longer than reap_after does not count", []Member{member("alive", "new"), longDead}, true},
		{"a member that left on purpose does not hold the roll up", []Member{member("alive", "new", "old"), member("left", "old")}, true},
		{"a member that says nothing of its secrets", []Member{member("alive", "new"), member("alive")}, false},
	} {
		if got := useNewSecret("new", tc.members, 72*time.Hour, now); got != tc.want {
			t.Errorf("%s: useNewSecret = %v, want %v", tc.name, got, tc.want)
		}
	}
}

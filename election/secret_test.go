package election

import "testing"

func TestUseNewSecret(t *testing.T) {
	member := func(state string, secrets ...string) Member {
		return Member{Name: state, State: state, Meta: Meta{Secrets: secrets}}
	}
	for _, tc := range []struct {
		name    string
		members []Member
		want    bool
	}{
		{"every member holds both", []Member{member("alive", "new", "old"), member("alive", "new", "old")}, true},
		{"one member holds only the old", []Member{member("alive", "new", "old"), member("alive", "old")}, false},
		{"a suspect member still counts", []Member{member("alive", "new"), member("suspect", "old")}, false},
		{"a dead member does not hold the roll up", []Member{member("alive", "new"), member("dead", "old")}, true},
		{"a departed member neither", []Member{member("alive", "new", "old"), member("left", "old")}, true},
		{"a member that says nothing of its secrets", []Member{member("alive", "new"), member("alive")}, false},
	} {
		if got := useNewSecret("new", tc.members); got != tc.want {
			t.Errorf("%s: useNewSecret = %v, want %v", tc.name, got, tc.want)
		}
	}
}

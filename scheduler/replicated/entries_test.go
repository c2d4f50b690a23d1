package replicated

import "testing"

// The version is a build setting: the test of an older binary lowers it
// with -ldflags -X.
func TestMustVersion(t *testing.T) {
	if got := mustVersion("1"); got != 1 {
		t.Errorf("mustVersion(1) = %d", got)
	}
	for _, bad := range []string{"", "0", "x"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("mustVersion(%q) did not panic", bad)
				}
			}()
			mustVersion(bad)
		}()
	}
}

package election

import (
	"errors"
	"fmt"
	"testing"
)

// A member gossip does not call alive is named with its state, and the
// error is ErrNotAlive however it is wrapped, so that a leader can tell
// a worker shown gone from one it has not heard of.
func TestNotAlive(t *testing.T) {
	err := fmt.Errorf("dispatch: %w", notAlive{name: "n2", state: "suspect"})
	if !errors.Is(err, ErrNotAlive) {
		t.Errorf("%v: want ErrNotAlive", err)
	}
	if got, want := err.Error(), "dispatch: node n2 is suspect in gossip"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if errors.Is(errors.New("node n2: no HTTP address in gossip"), ErrNotAlive) {
		t.Error("an unknown member: want not ErrNotAlive")
	}
}

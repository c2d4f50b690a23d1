package scheduler

import (
	"testing"

	"go.uber.org/goleak"
)

// Every leader term, dispatch and timer a test starts must be gone by the
// end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

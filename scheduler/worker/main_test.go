package worker

import (
	"testing"

	"go.uber.org/goleak"
)

// Every attempt, lease client and batch queue a test starts must be gone
// by the end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

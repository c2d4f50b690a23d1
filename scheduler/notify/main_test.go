package notify

import (
	"testing"

	"go.uber.org/goleak"
)

// Every sender, send and test server a test starts must be gone by the
// end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

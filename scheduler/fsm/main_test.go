package fsm

import (
	"testing"

	"go.uber.org/goleak"
)

// No change feed or subscriber a test opens may outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

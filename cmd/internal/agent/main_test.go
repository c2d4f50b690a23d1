package agent

import (
	"testing"

	"go.uber.org/goleak"
)

// Nothing a test of the agent starts may outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

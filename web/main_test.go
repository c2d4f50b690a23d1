package web

import (
	"testing"

	"go.uber.org/goleak"
)

// No server, stream or timer a test starts may outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

package main

import (
	"os"
	"testing"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// Package deploytest holds what the tests of deploy/ share: a release build
// of the fencecron binary (the one the unit, the image and the manifests
// run), and the rule for tools a test needs but Go does not provide.
package deploytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build builds cmd/fencecron into dir as a release build (no fault hooks,
// no race detector: what ships), with extra environment such as
// CGO_ENABLED=0, and returns the binary's path.
func Build(t testing.TB, dir string, env ...string) string {
	t.Helper()
	path := filepath.Join(dir, "fencecron")
	cmd := exec.Command("go", "build", "-trimpath", "-o", path, "github.com/fencecron/fencecron/cmd/fencecron")
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build %v: %v\n%s", env, err, out.String())
	}
	return path
}

// Tool returns the path of an external program a test needs. Outside CI a
// machine without it skips the test, saying how to get it; with CI=true
// (.ci/run installs it) its absence fails the test.
func Tool(t testing.TB, name, how string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found, and CI=true: %s (.ci/run does)", name, how)
	}
	t.Skipf("%s not found: %s to run this test", name, how)
	return ""
}

// Validate runs `fencecron validate path` with the given extra environment
// (the variables the config names) and fails the test on any problem or
// warning: a shipped config must be clean.
func Validate(t testing.TB, bin, path string, env ...string) {
	t.Helper()
	cmd := exec.Command(bin, "validate", path)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("fencecron validate %s: %v\n%s%s", path, err, stderr.String(), stdout.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("fencecron validate %s warns:\n%s", path, stderr.String())
	}
}

// Secrets are environment values that pass the config's secret rules,
// for validating shipped configs that take them from the environment.
var Secrets = []string{
	"FENCECRON_SECRET=3f9c2a7d8e1b4c6f0a5d9e2b7c4f1a8d6e3b0c9f2a5d8e1b",
	"FENCECRON_API_TOKEN=9b1e4d7a2c5f8e0b3d6a9c2f5e8b1d4a7c0f3e6b9d2a5c8f",
}

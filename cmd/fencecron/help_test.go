package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/jobfile"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

// `fencecron COMMAND -h` prints the command's usage and exits 0, for
// every command; a usage mistake still exits 2.
func TestHelp_ExitsZero(t *testing.T) {
	bin := proctest.Binary(t)
	for _, cmd := range []string{"dev", "agent", "apply", "status", "jobs", "runs", "explain", "trigger", "pause", "resume",
		"publish", "get", "validate", "health", "operator", "snapshot", "help", "version"} {
		out, err := exec.Command(bin, cmd, "-h").CombinedOutput()
		if err != nil {
			t.Errorf("fencecron %s -h: %v\n%s", cmd, err, out)
			continue
		}
		if !strings.Contains(strings.ToLower(string(out)), "usage") {
			t.Errorf("fencecron %s -h printed no usage:\n%s", cmd, out)
		}
	}
	var ee *exec.ExitError
	if out, err := exec.Command(bin, "trigger").CombinedOutput(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("fencecron trigger (no JOB): %v, want exit 2\n%s", err, out)
	}
}

// validate reads a ${NAME} that is not set as a warning (a config is
// checked in CI without its secrets), exit 0; apply does not need the
// node section's variables at all.
func TestValidate_UnsetEnvWarns(t *testing.T) {
	file := filepath.Join(t.TempDir(), "n1.yaml")
	const cfg = `node:
  name: n1
  data_dir: ${FENCECRON_TEST_UNSET_DIR}
  bootstrap_expect: 1
cluster:
  secret: ${FENCECRON_TEST_UNSET_SECRET}
jobs:
  - name: report
    schedule: "@daily"
    shell: 'echo ${NOT_EXPANDED_IN_JOBS}'
`
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, "validate", file)
	if err != nil {
		t.Fatalf("validate with unset variables: %v, want exit 0\n%s", err, out)
	}
	for _, want := range []string{
		"warning: " + file + ":3:13: node.data_dir: environment variable FENCECRON_TEST_UNSET_DIR is not set",
		"warning: " + file + ":6:11: cluster.secret: environment variable FENCECRON_TEST_UNSET_SECRET is not set",
		"report",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
	specs, err := jobfile.ReadSet(file)
	if err != nil || len(specs) != 1 || specs[0].Name != "report" {
		t.Errorf("apply's reading of a node config with unset variables: %v, %d jobs; want the one job", err, len(specs))
	}
	// A real problem still fails.
	if err := os.WriteFile(file, []byte(cfg+"    timeout: forever\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cli(t, "validate", file); err == nil {
		t.Errorf("validate of a bad timeout: exit 0\n%s", out)
	}
}

// cli runs a fencecron client command in this process.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, args, &out, &errOut)
	return out.String() + errOut.String(), err
}

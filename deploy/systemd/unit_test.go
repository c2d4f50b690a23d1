// Package systemd_test checks deploy/systemd: the unit file systemd itself
// accepts, the hardening it promises, and the example config it runs.
package systemd_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/deploy/internal/deploytest"
)

// shippedBinary is where the unit expects the binary.
const shippedBinary = "/usr/local/bin/fencecron"

// TestUnit_SystemdAnalyzeVerify runs `systemd-analyze verify` on the shipped
// unit. verify insists that ExecStart's program exists, so the test builds
// the binary and verifies a copy of the unit whose only change is that path;
// any message at all (an unknown key, a bad value) fails the test, because
// systemd ignores what it does not understand and starts the service anyway.
func TestUnit_SystemdAnalyzeVerify(t *testing.T) {
	tool := deploytest.Tool(t, "systemd-analyze", "install Debian's systemd package (apt-get install -y systemd)")
	unit, err := os.ReadFile("fencecron.service")
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.Count(unit, []byte(shippedBinary+" ")); got != 1 {
		t.Fatalf("the unit names %s %d times; want once, in ExecStart", shippedBinary, got)
	}
	dir := t.TempDir()
	bin := deploytest.Build(t, dir)
	copied := bytes.ReplaceAll(unit, []byte(shippedBinary+" "), []byte(bin+" "))
	path := filepath.Join(dir, "fencecron.service")
	if err := os.WriteFile(path, copied, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool, "verify", "--man=no", path)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestUnit_Hardening checks the settings the install guide relies on, so
// that removing one is a deliberate act.
func TestUnit_Hardening(t *testing.T) {
	u := mustParseUnit(t, "fencecron.service")
	want := map[string]string{
		"Service.User":                  "fencecron",
		"Service.StateDirectory":        "fencecron",
		"Service.ProtectSystem":         "strict",
		"Service.NoNewPrivileges":       "yes",
		"Service.Restart":               "on-failure",
		"Service.EnvironmentFile":       "/etc/fencecron/fencecron.env",
		"Service.ExecReload":            "/bin/kill -HUP $MAINPID",
		"Service.KillMode":              "mixed",
		"Service.KillSignal":            "SIGTERM",
		"Service.LimitNOFILE":           "65536",
		"Service.CapabilityBoundingSet": "",
		"Service.ExecStart":             shippedBinary + " agent -config /etc/fencecron/fencecron.yaml",
		"Install.WantedBy":              "multi-user.target",
	}
	for k, v := range want {
		got, ok := u[k]
		if !ok {
			t.Errorf("%s is missing; want %q", k, v)
			continue
		}
		if got != v {
			t.Errorf("%s = %q; want %q", k, got, v)
		}
	}
}

// TestExampleConfig_Validates runs `fencecron validate` on the config the
// unit's guide installs, with the variables its env file provides.
func TestExampleConfig_Validates(t *testing.T) {
	bin := deploytest.Build(t, t.TempDir())
	env := append([]string{"FENCECRON_POSTGRES_URL=" + envExample(t)["FENCECRON_POSTGRES_URL"]}, deploytest.Secrets...)
	deploytest.Validate(t, bin, "fencecron.yaml", env...)
	if got := envExample(t); len(got) != 3 {
		t.Errorf("fencecron.env.example sets %d variables; want FENCECRON_SECRET, FENCECRON_API_TOKEN, FENCECRON_POSTGRES_URL", len(got))
	}
}

// envExample reads fencecron.env.example's assignments.
func envExample(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("fencecron.env.example")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("fencecron.env.example: %q is not NAME=value", line)
		}
		vars[k] = v
	}
	return vars
}

// mustParseUnit reads a unit file into "Section.Key" -> value (the last
// assignment wins, as in systemd for single-valued keys).
func mustParseUnit(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not Key=value", path, line)
			}
			u[section+"."+strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

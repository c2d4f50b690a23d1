// Package proctest runs the real fencecron binary in tests: build it once,
// start nodes as processes on loopback with free ports, signal them, and
// poll their HTTP API with deadlines.
package proctest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/scheduler/faults"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	buildDir  string

	loadOnce sync.Once
	loadPath string
	loadErr  error
)

// Binary builds cmd/fencecron once per test process and returns its path.
// It is a test build: with the fault hooks (faults.BuildTag), so
// tests can set FENCECRON_FAULTS, and with the race detector when the
// tests run with it. Call Cleanup from TestMain to remove it.
func Binary(t testing.TB) string {
	t.Helper()
	skipShort(t)
	buildOnce.Do(func() { buildPath, buildErr = build(raceEnabled) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// skipShort skips a test that starts fencecron processes under -short:
// `go test -short ./...` runs the unit tests only, and every test that
// needs the binary asks for it here first.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts fencecron processes: run without -short")
	}
}

// LoadBinary is Binary built without the race detector whatever the tests
// run with, for the few tests that keep a whole cluster under a sustained
// load (dozens of runs a second for a minute): the race detector
// multiplies the cost of every run several times over, and a race-built
// cluster on a small CI machine falls behind its schedule and loses its
// leader to timeouts. Every other process test runs the race-built one.
func LoadBinary(t testing.TB) string {
	t.Helper()
	skipShort(t)
	if !raceEnabled {
		return Binary(t)
	}
	loadOnce.Do(func() { loadPath, loadErr = build(false) })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loadPath
}

var dirOnce sync.Once

// build builds the binary into the process's build directory.
func build(race bool) (string, error) {
	var err error
	dirOnce.Do(func() { buildDir, err = os.MkdirTemp("", "fencecron-bin-") })
	if err != nil || buildDir == "" {
		return "", fmt.Errorf("build directory: %v", err)
	}
	path := filepath.Join(buildDir, "fencecron")
	args := []string{"build", "-tags", faults.BuildTag, "-o", path}
	if race {
		args = append(args, "-race")
	} else if raceEnabled {
		path += "-norace"
		args[4] = path
	}
	cmd := exec.Command("go", append(args, "github.com/fencecron/fencecron/cmd/fencecron")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out.String())
	}
	return path, nil
}

// Cleanup removes the built binaries.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// FreePort returns a port on 127.0.0.1 that was free a moment ago, from
// outside the ephemeral range (see localcluster.FreePorts).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := localcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// Proc is a running fencecron process.
type Proc struct {
	Cmd     *exec.Cmd
	LogPath string
	exited  chan struct{}
	waitErr error
}

// Start runs the binary with args; its output goes to a log file in the
// test's temp dir, which is printed if the test fails. The process is
// killed when the test ends.
func Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary(t), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, LogPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Signal(syscall.SIGCONT)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("--- log of %s (tail) ---\n%s", name, b)
		}
	})
	return p
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error { return p.Cmd.Process.Signal(sig) }

// Wait waits up to d for the process to exit and returns its wait error.
func (p *Proc) Wait(d time.Duration) (error, bool) {
	select {
	case <-p.exited:
		return p.waitErr, true
	case <-time.After(d):
		return nil, false
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

var client = &http.Client{Timeout: 5 * time.Second}

// GetJSON fetches url and decodes the JSON answer into v.
func GetJSON(url string, v any) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Get fetches url and returns the body and headers.
func Get(url string) ([]byte, http.Header, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b, resp.Header, err
}

// Eventually polls cond every 50ms until it returns nil or d passes, and
// fails the test with cond's last error.
func Eventually(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

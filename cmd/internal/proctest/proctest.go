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

// The two builds of cmd/fencecron a test process may use, each made once.
var (
	plain = &buildOnce{race: false}
	raced = &buildOnce{race: raceEnabled}
)

// buildOnce is one build of the binary under test, made on first use.
type buildOnce struct {
	race bool
	once sync.Once
	path string
	err  error
}

func (b *buildOnce) get(t testing.TB) string {
	t.Helper()
	skipShort(t)
	b.once.Do(func() { b.path, b.err = build(b.race) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Binary builds cmd/fencecron once per test process and returns its path.
// It is a test build, with the fault hooks (faults.BuildTag) so tests can
// set FENCECRON_FAULTS, and without the race detector whatever the tests
// run with. An end-to-end test checks what the cluster does from outside;
// the race detector multiplies the CPU of every node several times, and
// with a dozen clusters on two cores that cost decides whether the suite
// finishes in minutes and whether elections hold. The race detector still
// watches the node's code: every package's unit tests run under it, and
// so do the nodes of the tests that use RaceBinary.
func Binary(t testing.TB) string {
	t.Helper()
	return plain.get(t)
}

// RaceBinary is Binary built with the race detector when the tests run
// with it. The tests that drive a node's concurrent paths through faults
// (leaders killed and paused, forced releases, a protocol's edge cases)
// run their nodes with it, so a data race those paths reach fails the
// suite. Tests that measure a bound in time do not: the race detector
// slows a node several times over.
func RaceBinary(t testing.TB) string {
	t.Helper()
	return raced.get(t)
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

var (
	dirOnce  sync.Once
	buildDir string
)

// build builds the binary into the process's build directory.
func build(race bool) (string, error) {
	var err error
	dirOnce.Do(func() { buildDir, err = os.MkdirTemp("", "fencecron-bin-") })
	if err != nil || buildDir == "" {
		return "", fmt.Errorf("build directory: %v", err)
	}
	path := filepath.Join(buildDir, "fencecron")
	args := []string{"build", "-tags", faults.BuildTag}
	if race {
		path += "-race"
		args = append(args, "-race")
	}
	args = append(args, "-o", path, "github.com/fencecron/fencecron/cmd/fencecron")
	cmd := exec.Command("go", args...)
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
	return StartEnv(t, name, nil, args...)
}

// StartEnv is Start with env ("KEY=value") added to the test process's
// environment, for a test that runs in parallel and so cannot set its own.
func StartEnv(t testing.TB, name string, env []string, args ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary(t), args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
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

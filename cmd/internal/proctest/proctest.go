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
	"github.com/fencecron/fencecron/scheduler"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	buildDir  string
)

// Binary builds cmd/fencecron once per test process and returns its path.
// It is a test build: with the fault hooks (scheduler.FaultsBuildTag), so
// tests can set FENCECRON_FAULTS. Call Cleanup from TestMain to remove it.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "fencecron-bin-")
		if buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "fencecron")
		args := []string{"build", "-tags", scheduler.FaultsBuildTag, "-o", buildPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "github.com/fencecron/fencecron/cmd/fencecron")...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out.String())
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// Cleanup removes the built binary.
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

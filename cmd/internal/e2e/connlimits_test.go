package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

// closedWithin reads from c until the server closes it, and returns what
// it read and how long that took. It fails the test if the server has
// not closed it after limit.
func closedWithin(t *testing.T, c net.Conn, start time.Time, limit time.Duration, what string) (string, time.Duration) {
	t.Helper()
	c.SetReadDeadline(start.Add(limit))
	var got bytes.Buffer
	_, err := io.Copy(&got, c)
	elapsed := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: still open after %s (read %q)", what, limit, got.String())
	}
	// io.Copy returns nil at EOF; a reset is a close too.
	return got.String(), elapsed
}

// A real `fencecron agent` with short api.limits cuts what the attacker
// of issue 11 left open: a /login POST whose body never finishes is
// answered and closed at read_timeout, a connection that never sends a
// request is closed at read_header_timeout, and an idle keep-alive
// connection at idle_timeout. Its config holds a literal secret at mode
// 0644, so the agent also logs the warning at startup.
func TestAgent_CutsSlowAndIdleConnections(t *testing.T) {
	t.Parallel()
	const (
		readHeaderTimeout = time.Second
		readTimeout       = 2 * time.Second
		idleTimeout       = time.Second
		slack             = 5 * time.Second // the bound on top of each timeout
	)
	path, httpPort := agentConfig(t, t.TempDir(), "slow1", "hardening-test-cluster-secret-0123456789", "", fmt.Sprintf(`store: {backend: bolt, serve: true}
api:
  limits: {read_header_timeout: %s, read_timeout: %s, idle_timeout: %s}
`, readHeaderTimeout, readTimeout, idleTimeout))
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	agent := proctest.Start(t, "agent", "agent", "-config", path)
	addr := "127.0.0.1:" + strconv.Itoa(httpPort)
	proctest.Eventually(t, 30*time.Second, "the agent serving", func() error {
		_, _, err := proctest.Get("http://" + addr + "/healthz")
		return err
	})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("slow login body", func(t *testing.T) {
		c := dial()
		start := time.Now()
		fmt.Fprintf(c, "POST /login HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=abc", addr)
		got, took := closedWithin(t, c, start, readTimeout+slack, "a login whose body never finishes")
		if took < readTimeout/2 {
			t.Errorf("closed after %s, before the read timeout (%s) could have cut it: %q", took, readTimeout, got)
		}
		if !strings.HasPrefix(got, "HTTP/1.1 400") || !strings.Contains(got, "cannot read the login form") {
			t.Errorf("answer before the close = %q, want 400 cannot read the login form", got)
		}
	})
	t.Run("no request", func(t *testing.T) {
		c := dial()
		got, took := closedWithin(t, c, time.Now(), readHeaderTimeout+slack, "a connection that sends nothing")
		if took < readHeaderTimeout/2 || got != "" {
			t.Errorf("closed after %s with %q; want silence until the header timeout (%s)", took, got, readHeaderTimeout)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		// Read the one answer, then wait for the close.
		buf := make([]byte, 4096)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		if err != nil || !strings.Contains(string(buf[:n]), "\r\n\r\nok\n") {
			t.Fatalf("healthz = %q, %v", buf[:n], err)
		}
		got, took := closedWithin(t, c, time.Now(), idleTimeout+slack, "an idle keep-alive connection")
		if took < idleTimeout/2 || got != "" {
			t.Errorf("closed after %s with %q; want it kept until the idle timeout (%s)", took, got, idleTimeout)
		}
	})

	// The literal secret in a world-readable file was logged as a warning.
	log, err := os.ReadFile(agent.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte("config: written in a file the group or others may read (mode 0644)")) ||
		bytes.Contains(log, []byte("hardening-test-cluster-secret-0123456789")) {
		t.Errorf("agent log lacks the warning, or shows the secret:\n%s", log)
	}
	var status struct{ Node string }
	if err := proctest.GetJSON("http://"+addr+"/api/v1/status", &status); err != nil || status.Node != "slow1" {
		t.Errorf("after the cut connections the agent answers %+v, %v", status, err)
	}
}

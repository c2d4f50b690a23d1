package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

// jobSetOf returns the job set a node runs: its hash and job names.
func jobSetOf(base string) (string, []string, error) {
	var out struct {
		Info struct{ Hash string }
		Jobs []struct{ Name string }
	}
	if err := proctest.GetJSON(base+"/api/v1/jobset", &out); err != nil {
		return "", nil, err
	}
	var names []string
	for _, j := range out.Jobs {
		names = append(names, j.Name)
	}
	return out.Info.Hash, names, nil
}

// putJobSet sends PUT /api/v1/jobset as a browser page would, with the
// given Host and Origin, and returns the status and body.
func putJobSet(t *testing.T, base, host, origin, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("PUT", base+"/api/v1/jobset", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The DNS-rebinding attack of issue 11 against a real `fencecron dev`
// (no api.token): a page on attacker.example whose name now points at
// 127.0.0.1 makes its visitor's browser PUT a new job set. The request
// arrives from loopback with Host and Origin attacker.example; it is
// refused with 421 and the job set is unchanged. The same request
// addressed to 127.0.0.1 is taken, so it is the name that was refused.
func TestDev_RefusesDNSRebinding(t *testing.T) {
	httpPort := proctest.FreePort(t)
	dev := startDev(t, t.TempDir(), httpPort, proctest.FreePort(t), proctest.FreePort(t))
	var before string
	proctest.Eventually(t, 30*time.Second, "the dev job set applied", func() error {
		hash, _, err := jobSetOf(dev.base)
		if err == nil && hash == "" {
			err = errors.New("no job set yet")
		}
		before = hash
		return err
	})

	const evil = `{"source":"attacker.example","jobs":[{"name":"pwned","schedules":["@every 1s"],"shell":"true"}]}`
	attacker := fmt.Sprintf("attacker.example:%d", httpPort)
	code, body := putJobSet(t, dev.base, attacker, "http://"+attacker, evil)
	if code != http.StatusMisdirectedRequest || !strings.Contains(body, "api.allowed_hosts") {
		t.Errorf("rebinding PUT /api/v1/jobset = %d, want 421 naming api.allowed_hosts\n%s", code, body)
	}
	if hash, names, err := jobSetOf(dev.base); err != nil || hash != before || strings.Contains(strings.Join(names, ","), "pwned") {
		t.Errorf("job set after the refused PUT: hash %s (was %s), jobs %v, %v", hash, before, names, err)
	}

	// The startup log says what is open.
	log, err := os.ReadFile(dev.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte("change: loopback-only, no API token")) {
		t.Errorf("startup log lacks the access line:\n%s", log)
	}

	// Control: addressed to the node's own address, the same body from
	// the same host is a change the node takes.
	code, body = putJobSet(t, dev.base, fmt.Sprintf("127.0.0.1:%d", httpPort), "", evil)
	if code != http.StatusOK {
		t.Fatalf("PUT /api/v1/jobset addressed to 127.0.0.1 = %d, want 200\n%s", code, body)
	}
	if hash, names, err := jobSetOf(dev.base); err != nil || hash == before || !strings.Contains(strings.Join(names, ","), "pwned") {
		t.Errorf("after the control PUT: hash %s (was %s), jobs %v, %v; want the new set", hash, before, names, err)
	}
}

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

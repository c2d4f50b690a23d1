package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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
	t.Parallel()
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

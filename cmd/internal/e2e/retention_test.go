package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/fencedstore"
)

// The real binary: a node keeps earlier bodies, readable through the API
// and `fencecron get -version`; restarted with a retention rule, it
// deletes the oldest key at once, and the deleted key's old owner cannot
// bring it back with its token (exit 3, stale_owner, recorded), while a
// newer token recreates it.
func TestAgent_RetentionAndVersions(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 1, Profile: "fast"})
	n := c.Nodes[0]
	sg, err := fencedstore.NewSigner([]byte(c.Secret))
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(n.URL(), "http://")
	fencecron := func(token, stdin string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(proctest.Binary(t), args...)
		cmd.Env = append(os.Environ(), "FENCECRON_STORE="+addr, "FENCECRON_TOKEN="+token)
		cmd.Stdin = strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
		defer timer.Stop()
		cmd.Wait()
		return out.String(), cmd.ProcessState.ExitCode()
	}
	publish := func(seq uint64, key, body string) (string, int) {
		t.Helper()
		return fencecron(mustSign(t, sg, 1<<40, seq, "manual/"), body, "publish", key)
	}
	var out string
	var code int
	localcluster.Until(30*time.Second, func() error {
		if out, code = publish(5, "manual/old.csv", "old report\n"); code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})
	if code != 0 {
		t.Fatalf("publish to the node's store: exit %d: %s", code, out)
	}
	for i, body := range []string{"v1\n", "v2\n", "v3\n", "v4\n"} {
		if out, code := publish(uint64(10+i), "manual/new.csv", body); code != 0 {
			t.Fatalf("publish %s: exit %d: %s", body, code, out)
		}
	}

	// Versions: the last 3 (store.keep_versions' default).
	if out, code := fencecron("", "", "get", "-version", "2", "manual/new.csv"); code != 0 || out != "v2\n" {
		t.Errorf("get -version 2: exit %d: %q", code, out)
	}
	if out, code := fencecron("", "", "get", "-version", "1", "manual/new.csv"); code != exitNotFound || !strings.Contains(out, "versions 2, 3, 4") {
		t.Errorf("get -version 1: exit %d, want %d naming the kept versions: %q", code, exitNotFound, out)
	}
	resp, err := http.Get(n.URL() + "/api/v1/store/manual/new.csv?version=3")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "v3\n" || resp.Header.Get("Fencecron-Version") != "3" {
		t.Errorf("GET ?version=3 = %d %q version %q", resp.StatusCode, b, resp.Header.Get("Fencecron-Version"))
	}

	// Restart with a rule keeping one key under manual/: the first sweep
	// runs at start and deletes the least recently changed, old.csv.
	n.Kill()
	cfg, err := os.ReadFile(n.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	withRule := strings.Replace(string(cfg), "  serve: true\n", "  serve: true\n  retention: [{prefix: manual/, max_keys: 1}]\n", 1)
	if withRule == string(cfg) {
		t.Fatalf("no store section to add the rule to:\n%s", cfg)
	}
	if err := os.WriteFile(n.ConfigPath, []byte(withRule), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	err = localcluster.Until(30*time.Second, func() error {
		if out, code := fencecron("", "", "get", "manual/old.csv"); code != exitNotFound {
			return fmt.Errorf("get manual/old.csv: exit %d: %s", code, out)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("retention did not delete the oldest key: %v", err)
	}
	if out, code := fencecron("", "", "get", "manual/new.csv"); code != 0 || out != "v4\n" {
		t.Errorf("the newest key after retention: exit %d: %q", code, out)
	}

	// The deleted key's owner comes back with its token: refused.
	if out, code := publish(5, "manual/old.csv", "resurrected\n"); code != exitStaleOwner {
		t.Fatalf("publish with the deleted key's token: exit %d, want %d: %s", code, exitStaleOwner, out)
	}
	if out, code := fencecron("", "", "get", "manual/old.csv"); code != exitNotFound {
		t.Fatalf("a stale token brought the key back: exit %d: %q", code, out)
	}
	var hist struct{ Decisions []fencedstore.Decision }
	if err := n.GetJSON("/api/v1/history/manual/old.csv", &hist); err != nil {
		t.Fatal(err)
	}
	if h := hist.Decisions; len(h) != 2 || h[0].Outcome != fencedstore.Deleted || h[1].Outcome != fencedstore.StaleOwner {
		t.Errorf("history of the deleted key = %+v; want deleted, then the refusal", h)
	}
	if out, code := publish(100, "manual/old.csv", "new owner\n"); code != 0 || !strings.Contains(out, "version=1") {
		t.Errorf("a newer token on the deleted key: exit %d: %s", code, out)
	}
	var metrics string
	localcluster.Until(10*time.Second, func() error {
		resp, err := http.Get(n.URL() + "/metrics")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
		return nil
	})
	if !strings.Contains(metrics, `fencecron_store_retention_deleted_total{prefix="manual/",reason="count"} 1`) {
		t.Errorf("metrics do not count the deletion:\n%s", grepLines(metrics, "retention"))
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			b.WriteString(line)
		}
	}
	return b.String()
}

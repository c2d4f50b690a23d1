package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// log.format picks the agent's log format and -log-format overrides it;
// a format that is neither text nor json stops dev and agent before
// anything starts.
func TestLogFormat_FileAndFlag(t *testing.T) {
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "n1.yaml")
	// The node cannot start (its data_dir is a file), but it logs first.
	src := "node: {name: n1, data_dir: " + notADir + ", bootstrap_expect: 1}\ncluster: {secret: correct-horse-battery-staple-0123456789}\nlog: {format: json}\n"
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	firstLine := func(args ...string) string {
		t.Helper()
		var out, errOut strings.Builder
		if err := run(t.Context(), args, &out, &errOut); err == nil {
			t.Fatalf("%v started on a data_dir that is a file", args)
		}
		line, _, _ := strings.Cut(errOut.String(), "\n")
		return line
	}
	var m map[string]any
	if line := firstLine("agent", "-config", cfg); json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "fencecron agent" || m["node"] != "n1" {
		t.Errorf("agent with log.format json: first line %q, want a JSON object", line)
	}
	if line := firstLine("agent", "-config", cfg, "-log-format", "text"); !strings.Contains(line, `msg="fencecron agent"`) || strings.HasPrefix(line, "{") {
		t.Errorf("agent -log-format text: first line %q, want text", line)
	}
	for _, args := range [][]string{{"agent", "-config", cfg, "-log-format", "xml"}, {"dev", "-data", dir, "-http", "127.0.0.1:0", "-log-format", "xml"}} {
		var out, errOut strings.Builder
		if err := run(t.Context(), args, &out, &errOut); err == nil || err.Error() != `-log-format: "xml": want text or json` {
			t.Errorf("%v: err = %v", args, err)
		}
	}
}

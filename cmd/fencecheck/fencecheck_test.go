package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// The short seeded run CI does: a real cluster under every kind of fault
// for about a minute, then every check. It fails on any violation.
// FENCECHECK_DURATION and FENCECHECK_SEED change the run.
func TestFencecheck_ShortSeededRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a six-node cluster for about two minutes")
	}
	cfg := Config{
		Binary: proctest.Binary(t), Dir: t.TempDir(),
		Duration: 70 * time.Second, Seed: 8, Drain: 60 * time.Second, Workers: 2,
	}
	if d, err := time.ParseDuration(os.Getenv("FENCECHECK_DURATION")); err == nil {
		cfg.Duration = d
	}
	if s := os.Getenv("FENCECHECK_SEED"); s != "" {
		var seed uint64
		if _, err := fmt.Sscan(s, &seed); err == nil {
			cfg.Seed = seed
		}
	}
	var log bytes.Buffer
	cfg.Log = &syncWriter{w: &log}
	rep, err := New(cfg).Run(t.Context())
	if err != nil {
		// The node logs go with the test's directory: their ends are
		// all a failure in CI leaves to read.
		t.Fatalf("%v\n%s\n%s\n%s", err, log.String(), logTails(cfg.Dir, 40), logMatches(cfg.Dir, raftTrouble, 40))
	}
	var out strings.Builder
	rep.Print(&out)
	t.Logf("progress:\n%s\n%s", log.String(), out.String())
	if err := rep.WriteJSON(cfg.Dir + "/report.json"); err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Errorf("violations (node logs were in %s)", cfg.Dir)
	}
	c := rep.Counts
	if c.Attempts == 0 || c.FencedAttempts == 0 || c.StalePublishRefused == 0 || c.Takeovers == 0 {
		t.Errorf("the run did not exercise fencing: %d attempts, %d fenced, %d stale publishes refused, %d takeovers",
			c.Attempts, c.FencedAttempts, c.StalePublishRefused, c.Takeovers)
	}
	if len(rep.Faults) < 5 {
		t.Errorf("only %d faults ran", len(rep.Faults))
	}
}

// logTails is the last n lines of each node's log in dir.
func logTails(dir string, n int) string {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var out strings.Builder
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintf(&out, "%s: %v\n", p, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		fmt.Fprintf(&out, "--- the last %d lines of %s:\n%s\n", min(n, len(lines)), filepath.Base(p), strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
	return out.String()
}

// raftTrouble matches the log lines that say why a node's Raft may have
// stopped taking entries: a log write that hung, appends refused or
// failing, snapshots installed or refused, a restart's restore.
var raftTrouble = regexp.MustCompile(`hung|failed to append to logs|rejecting|snapshot|restor|panic|heartbeat timeout|entering`)

// logMatches is the last n lines of each node's log in dir that re
// matches: what happened to a node's Raft over the whole run, which the
// tails alone may have scrolled past.
func logMatches(dir string, re *regexp.Regexp, n int) string {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var out strings.Builder
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var hits []string
		for line := range strings.Lines(string(b)) {
			if re.MatchString(line) {
				hits = append(hits, strings.TrimRight(line, "\n"))
			}
		}
		fmt.Fprintf(&out, "--- %d lines of %s about its Raft log, the last %d:\n%s\n", len(hits), filepath.Base(p), min(n, len(hits)), strings.Join(hits[max(0, len(hits)-n):], "\n"))
	}
	return out.String()
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

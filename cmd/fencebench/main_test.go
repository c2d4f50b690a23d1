package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
)

func TestMain(m *testing.M) {
	// lateness runs its bare starts in processes of its own executable:
	// here, this test binary.
	if os.Getenv(childEnv) == "starts" {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	proctest.Cleanup()
	os.Exit(code)
}

// The harness itself works end to end: two leader kills, both measured,
// and the ticks due after each counted, none of them started twice.
func TestFailover_Smoke(t *testing.T) {
	var out, errOut bytes.Buffer
	keep := t.TempDir()
	defer logsOnFailure(t, keep)
	err := run(t.Context(), []string{"failover", "-rounds", "2", "-profile", "fast", "-bin", proctest.Binary(t), "-keep", keep}, &out, &errOut)
	if err != nil {
		t.Fatalf("failover: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "2 leader stops") || !strings.Contains(out.String(), "SIGKILL of the leader") || !strings.Contains(out.String(), "first committed grant") {
		t.Errorf("output:\n%s", out.String())
	}
	m := regexp.MustCompile(`of the ticks due within 3s of each stop, (\d+) held by the stopped leader \(\d+ of them never started\), (\d+) not \(\d+ never started\); (\d+) started twice`).FindStringSubmatch(out.String())
	if m == nil || (m[1] == "0" && m[2] == "0") || m[3] != "0" {
		t.Errorf("want the ticks after each stop counted, none started twice:\n%s", out.String())
	}
}

// The planned-stop mode: SIGTERM, the leader hands over and exits, and
// is started again between rounds.
func TestFailover_SmokeSIGTERM(t *testing.T) {
	var out, errOut bytes.Buffer
	keep := t.TempDir()
	defer logsOnFailure(t, keep)
	err := run(t.Context(), []string{"failover", "-rounds", "2", "-profile", "fast", "-signal", "term", "-bin", proctest.Binary(t), "-keep", keep}, &out, &errOut)
	if err != nil {
		t.Fatalf("failover -signal term: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "SIGTERM of the leader") || !strings.Contains(out.String(), "first committed grant") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestLateness_Smoke(t *testing.T) {
	var out, errOut bytes.Buffer
	keep := t.TempDir()
	defer logsOnFailure(t, keep)
	err := run(t.Context(), []string{"lateness", "-rates", "5", "-duration", "3s", "-warmup", "2s", "-bare", "2s", "-bin", proctest.Binary(t), "-keep", keep}, &out, &errOut)
	if err != nil {
		t.Fatalf("lateness: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "5 ") {
		t.Fatalf("output:\n%s", out.String())
	}
	// What a user reads of the smoke run: every one of the 15 fire times
	// of the window (5 jobs, 3 s) started and succeeded, late by a
	// lateness that is a time, p50 <= p99 <= max, with some Raft entries
	// per run. fires/s, runs started, p50, ms, p99, ms, max, ms,
	// succeeded runs/s, % succeeded, raft entries/run, % delivered.
	f := strings.Fields(lines[1])
	if len(f) != 12 || f[1] != "15" || f[8] != "5.0" || f[9] != "100.0%" || f[11] != "100.0%" {
		t.Errorf("row %q: want 15 runs started, 5.0 succeeded a second, 100.0%% of the fire times succeeded and delivered:\n%s", f, out.String())
	} else if late, ok := parseMs(f[2], f[4], f[6]); !ok || late[0] > late[1] || late[1] > late[2] {
		t.Errorf("lateness p50 %s, p99 %s, max %s: want times in order:\n%s", f[2], f[4], f[6], out.String())
	} else if e, err := strconv.ParseFloat(f[10], 64); err != nil || e <= 0 {
		t.Errorf("raft entries/run %q, want a positive number:\n%s", f[10], out.String())
	}
	// The resources table: the nodes' memory at the window's start, most
	// and end, their CPU and their jobs' per run, and the elections:
	// 5, N, MiB, N, MiB, N, MiB, X, ms, Y, ms, E.
	var res []string
	for i, l := range lines {
		if strings.HasPrefix(l, "fires/s  anonymous RSS") && i+1 < len(lines) {
			res = strings.Fields(lines[i+1])
		}
	}
	if len(res) != 12 || res[0] != "5" || res[1] == "0" || res[2] != "MiB" || res[7] == "0.00" || res[8] != "ms" {
		t.Errorf("resources row = %q, want the nodes' memory and CPU:\n%s", res, out.String())
	} else if _, err := strconv.Atoi(res[11]); err != nil {
		t.Errorf("elections = %q, want a count", res[11])
	}
	// The reference: 5 starts in each of 2 seconds, none failed:
	// process, 5, 10, p50 ms, p99 ms, max ms, 0, CPU ms.
	var ref []string
	for i, l := range lines {
		if strings.HasPrefix(l, "jobs ") && strings.Contains(l, "starters and jobs") && i+1 < len(lines) {
			ref = strings.Fields(lines[i+1])
		}
	}
	if len(ref) != 12 || ref[0] != "process" || ref[1] != "5" || ref[2] != "10" || ref[9] != "0" || ref[10] == "0.00" {
		t.Errorf("reference row = %q, want 10 starts, none failed:\n%s", ref, out.String())
	} else {
		for _, f := range []string{ref[3], ref[5], ref[7]} { // p50, p99, max
			if ms, err := strconv.ParseFloat(f, 64); err != nil || ms < 0 || ms >= 1000 {
				t.Errorf("reference lateness %q ms, want under a second:\n%s", f, out.String())
			}
		}
	}
}

// The reference's starts: every one after its second, by less than a
// second, none failed, and their CPU counted.
func TestBareStarts_EachAfterItsSecond(t *testing.T) {
	res, err := bareStarts(t.Context(), 4, 2*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.lateness) != 8 || res.failed != 0 {
		t.Fatalf("%d started, %d failed; want 8 started", len(res.lateness), res.failed)
	}
	for _, d := range res.lateness {
		if d <= 0 || d >= time.Second {
			t.Errorf("a start %v after its second, want within the second after it", d)
		}
	}
	if res.cpu <= 0 {
		t.Errorf("CPU of the starts = %v, want some", res.cpu)
	}
}

// The HTTP reference's requests: each of the three processes' GETs
// reached the receiver after its second, by less than a second, and none
// failed.
func TestBareStarts_HTTPEachAfterItsSecond(t *testing.T) {
	res, err := bareStarts(t.Context(), 4, 2*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	if !res.http || len(res.lateness) != 8 || res.failed != 0 {
		t.Fatalf("http %v: %d arrived, %d failed; want 8 requests arrived", res.http, len(res.lateness), res.failed)
	}
	for _, d := range res.lateness {
		if d <= 0 || d >= time.Second {
			t.Errorf("a request arrived %v after its second, want within the second after it", d)
		}
	}
}

// A reference cancelled (Ctrl-C) while its processes run says that it
// was, not how its processes died. Whether the deadline comes before
// they started or while they wait for their first second, the answer
// is the same.
func TestBareStarts_Cancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := bareStarts(ctx, 4, 3*time.Second, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the deadline", err)
	}
}

// logsOnFailure prints the tail of every node's log the harness kept in
// dir, when the test failed.
func logsOnFailure(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	more, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	deeper, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*.log")) // failover: one directory per binary
	for _, p := range append(append(more, logs...), deeper...) {
		t.Logf("--- %s (tail) ---\n%s", p, localcluster.LogTail(p, 6000))
	}
	// A node whose stop ran past its budget wrote every goroutine's stack
	// into its data directory, which the test's cleanup removes: the
	// ones in Raft say what the stop waited for.
	dumps, _ := filepath.Glob(filepath.Join(dir, "*", "data", "*", "shutdown-goroutines.txt"))
	for _, p := range dumps {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var raft []string
		for _, g := range strings.Split(string(b), "\n\n") {
			if strings.Contains(g, "hashicorp/raft") || strings.Contains(g, "fencecron/election") {
				raft = append(raft, g)
			}
		}
		t.Logf("--- %s (the goroutines in Raft and election) ---\n%.20000s", p, strings.Join(raft, "\n\n"))
	}
}

// scale with -compare measures both binaries at each size, each row
// named by its binary; -cluster=false measures the dev node only.
func TestScale_SmokeCompare(t *testing.T) {
	var out, errOut bytes.Buffer
	keep := t.TempDir()
	bin := proctest.Binary(t)
	err := run(t.Context(), []string{"scale", "-jobs", "20", "-cluster=false", "-settle", "0s", "-compare", bin, "-bin", bin, "-keep", keep}, &out, &errOut)
	if err != nil {
		t.Fatalf("scale: %v\n%s", err, errOut.String())
	}
	if got := strings.Count(out.String(), "\n20 "); got != 0 {
		t.Errorf("rows without a binary's name:\n%s", out.String())
	}
	for _, label := range []string{"compare (", "this ("} {
		if !strings.Contains(out.String(), label) {
			t.Errorf("no row %q:\n%s", label, out.String())
		}
	}
}

// Issue 30: 16 clients exporting the whole job set of a real node at
// once keep its memory under 2 × its idle RSS + 64 MiB, and each gets the
// whole set. 20,000 jobs keep the test short; `fencebench exports`
// measures 100,000. The node is built without the race detector, whose
// own memory would be what is measured.
func TestExports_MemoryBound(t *testing.T) {
	keep := t.TempDir()
	defer logsOnFailure(t, keep)
	r, err := measureExports(t.Context(), proctest.Binary(t), keep, 20000, 16, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("20000 jobs, 16 exports of %s: idle RSS %s, max %s, bound %s, %d refused for now", mib(r.answer), mib(r.idle), mib(r.max), mib(r.bound()), r.refused)
	if !r.within() {
		t.Errorf("max RSS %s under 16 exports, over 2 × idle (%s) + 64 MiB = %s", mib(r.max), mib(r.idle), mib(r.bound()))
	}
}

// parseMs parses lateness cells (the number before " ms"), in order.
func parseMs(cells ...string) ([]float64, bool) {
	var out []float64
	for _, c := range cells {
		v, err := strconv.ParseFloat(c, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

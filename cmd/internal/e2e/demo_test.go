package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// demoProc is a running `fencecron demo` and what it has printed.
type demoProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	exited chan struct{}
	err    error
}

func (p *demoProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// pids are the processes the demo said it started.
func (p *demoProc) pids() []int {
	var pids []int
	for _, m := range demoPidRE.FindAllStringSubmatch(p.output(), -1) {
		pid, _ := strconv.Atoi(m[1])
		pids = append(pids, pid)
	}
	return pids
}

// stop sends sig (called name) to the demo and wants it to exit 0 within 90s.
func (p *demoProc) stop(t *testing.T, sig syscall.Signal, name string) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("the demo did not exit within 90s of %s", name)
	}
	if p.err != nil {
		t.Errorf("the demo exited with %v after %s, want 0", p.err, name)
	}
}

// waitFor waits until the output holds s, the demo exits, or d passes.
func (p *demoProc) waitFor(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.output(), s) {
		select {
		case <-p.exited:
			t.Fatalf("the demo exited (%v) before printing %q:\n%s", p.err, s, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not print %q within %s:\n%s", s, d, p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startDemo runs the built binary's demo command in its own process
// group. It keeps TMPDIR: the nodes' ports are reserved in a registry
// there that every test process shares (see localcluster.FreePorts).
func startDemo(t *testing.T, args ...string) *demoProc {
	t.Helper()
	cmd := exec.Command(proctest.Binary(t), append([]string{"demo"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &demoProc{cmd: cmd, exited: make(chan struct{})}
	cmd.Stderr = &lockedWriter{p: p}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	go func() {
		<-copied
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			// The test failed half-way: stop it all, hard.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			select {
			case <-p.exited:
			case <-time.After(45 * time.Second):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-p.exited
			}
		}
		if dir := demoDirOf(p.output()); dir != "" {
			localcluster.KillMarked(demoMarker + "=" + dir)
			os.RemoveAll(dir) // kept by a demo whose story failed
		}
		if t.Failed() {
			t.Logf("--- demo output ---\n%s", p.output())
		}
	})
	return p
}

type lockedWriter struct{ p *demoProc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

var (
	demoDirRE  = regexp.MustCompile(`on loopback, in (\S+):\n`)
	demoPidRE  = regexp.MustCompile(`\bpid (\d+)\b`)
	demoDashRE = regexp.MustCompile(`dashboard (http://\S+)/ `)
)

func demoDirOf(out string) string {
	if m := demoDirRE.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// One story of `fencecron demo`, from its real processes and its API:
// w1's attempt holds report with an older token, w2's takeover publishes
// with a newer one, w1's late publish is refused as stale_owner and
// changes nothing, a new epoch follows the leader's death, the narration
// names both tokens, the dashboard draws it (Chromium), and Ctrl-C leaves
// no process and no data behind.
func TestDemo_Story(t *testing.T) {
	t.Parallel()
	p := startDemo(t, "-http", fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t)))
	p.waitFor(t, "story 1 done", 4*time.Minute)
	out := p.output()
	if first := strings.SplitN(out, "\n", 2)[0]; !strings.Contains(first, "dashboard http://127.0.0.1:") {
		t.Errorf("first line %q: want the dashboard's address", first)
	}
	dash := demoDashRE.FindStringSubmatch(out)
	if dash == nil {
		t.Fatalf("no dashboard address in:\n%s", out)
	}
	base := dash[1]
	dir := demoDirOf(out)
	if dir == "" {
		t.Fatalf("the demo did not say where its cluster lives:\n%s", out)
	}

	// Read the story back through the dashboard's API.
	var story, later *jobs.Run
	proctest.Eventually(t, 30*time.Second, "the story's runs, ended", func() error {
		var runs struct{ Runs []jobs.Run }
		if err := proctest.GetJSON(base+"/api/v1/runs?job=report", &runs); err != nil {
			return err
		}
		story, later = nil, nil
		for i := range runs.Runs {
			switch r := &runs.Runs[i]; len(r.Attempts) {
			case 2:
				story = r
			case 1:
				later = r
			}
		}
		if story == nil || later == nil {
			return fmt.Errorf("report runs %+v: want one with a takeover and one after it", runs.Runs)
		}
		if !story.State.Terminal() || !story.Attempts[0].State.Terminal() || !later.State.Terminal() {
			return fmt.Errorf("runs %s (%s, w1's attempt %s) and %s (%s) not ended yet", story.ID, story.State, story.Attempts[0].State, later.ID, later.State)
		}
		return nil
	})
	old, newer := story.Attempts[0], story.Attempts[1]
	if old.Worker != "w1" || newer.Worker != "w2" || !fence(old.Token).Less(fence(newer.Token)) {
		t.Fatalf("attempts %+v and %+v: want w1 then w2 with a greater token", old, newer)
	}
	if old.State != jobs.Fenced || old.StoreOutcome != string(fencedstore.StaleOwner) || newer.State != jobs.Succeeded || story.State != jobs.Succeeded {
		t.Errorf("w1's attempt is %s (store %q), w2's %s, the run %s: want fenced by stale_owner, succeeded, succeeded", old.State, old.StoreOutcome, newer.State, story.State)
	}
	var hist struct{ Decisions []fencedstore.Decision }
	if err := proctest.GetJSON(base+"/api/v1/history/"+story.Output, &hist); err != nil {
		t.Fatal(err)
	}
	applied, stale, refusals := -1, -1, 0
	for i, d := range hist.Decisions {
		switch {
		case d.Outcome == fencedstore.Applied && d.Token == fence(newer.Token):
			applied = i
		case d.Outcome == fencedstore.StaleOwner && d.Token == fence(old.Token):
			stale = i
			refusals++
			if d.Greatest != fence(newer.Token) || d.Version != 1 {
				t.Errorf("refusal %+v: want greatest %s, version still 1", d, newer.Token)
			}
		case d.Outcome == fencedstore.Applied && d.Token == fence(old.Token):
			t.Errorf("w1's stale write was applied: %+v", d)
		}
	}
	if applied < 0 || stale < applied || refusals != 1 {
		t.Errorf("history of %s = %+v: want applied(%s), then one stale_owner(%s)", story.Output, hist.Decisions, newer.Token, old.Token)
	}
	body, _, err := proctest.Get(base + "/api/v1/store/" + story.Output)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("report written by w2 with token %s\n", newer.Token); string(body) != want {
		t.Errorf("body of %s = %q, want w2's %q", story.Output, body, want)
	}
	if lt := later.Attempts[0].Token; lt.Epoch <= newer.Token.Epoch {
		t.Errorf("the report after the leader's death has token %s: want an epoch above %d", lt, newer.Token.Epoch)
	}

	// The narration names both tokens at the steps that matter.
	for _, want := range []string{
		"w1 holds report with token " + old.Token.String(),
		"w2 granted report with token " + newer.Token.String(),
		fmt.Sprintf("w2 published v1 of %s with %s", story.Output, newer.Token),
		fmt.Sprintf("w1 tried %s: refused (stale_owner), the store holds %s", old.Token, newer.Token),
		"killed (SIGKILL)",
		"elected leader: epoch ",
		fmt.Sprintf("report again, in epoch %d: %s granted %s", later.Attempts[0].Token.Epoch, later.Attempts[0].Worker, later.Attempts[0].Token),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the narration does not say %q", want)
		}
	}

	t.Logf("the narration:\n%s", out[strings.Index(out, "story 1:"):])
	t.Run("timeline in Chromium", func(t *testing.T) { demoTimeline(t, base) })

	// Ctrl-C: every process goes, and the data with them.
	pids := p.pids()
	if len(pids) < 7 {
		t.Fatalf("pids %v: want the six nodes' and the restarted leader's", pids)
	}
	p.stop(t, syscall.SIGINT, "SIGINT")
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d is still there after the demo exited (%v)", pid, err)
		}
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d is still there after the demo exited (%v)", pid, err)
		}
	}
	if left := localcluster.MarkedProcs(demoMarker + "=" + dir); len(left) > 0 {
		t.Errorf("processes of the demo's cluster left: %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo's data %s is still there (%v)", dir, err)
	}
}

// demoTimeline loads the demo's timeline in Chromium: two epoch bands,
// the two attempts of the story on w1's and w2's lanes, and the refused
// write as a cross on w1's lane. The screenshot goes to the test's temp
// dir and to $FENCECRON_DEMO_SCREENSHOT if set.
func demoTimeline(t *testing.T, base string) {
	browser := chromium(t)
	ctx, step, poll := newBrowser(t, browser)
	step("open the report's timeline through the demo's dashboard",
		chromedp.Navigate(base+"/timeline?job=report"),
		chromedp.WaitVisible(chromedp.CSS("svg#timeline g.attempt")),
	)
	got := poll("epoch bands and w1's refused write", `(() => {
		const epochs = new Set(Array.from(document.querySelectorAll("svg#timeline rect.band")).map(b => b.getAttribute("data-epoch")));
		const lane = document.querySelector('svg#timeline g.lane[data-lane="w1"] text');
		if (!lane || epochs.size < 2) return "";
		const top = Number(lane.getAttribute("y")) - 25, bottom = top + 42;
		const crosses = Array.from(document.querySelectorAll("svg#timeline g.mark-refused")).filter(g => {
			const m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(g.getAttribute("transform") || "");
			return m && Number(m[2]) > top && Number(m[2]) < bottom;
		});
		const bars = document.querySelectorAll("svg#timeline g.attempt").length;
		return crosses.length >= 1 && bars >= 3 ? "epochs " + Array.from(epochs).join(",") + ", " + bars + " attempts, refused on w1" : "";
	})()`, 30*time.Second)
	t.Logf("timeline: %s", got)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "demo-timeline.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))
	if extra := os.Getenv("FENCECRON_DEMO_SCREENSHOT"); extra != "" {
		if err := os.WriteFile(extra, shot, 0o644); err != nil {
			t.Errorf("FENCECRON_DEMO_SCREENSHOT: %v", err)
		}
		t.Logf("screenshot also at %s", extra)
	}
}

// Bad flags are refused with a message that says what is wrong, before
// any process starts.
func TestDemo_BadFlags(t *testing.T) {
	t.Parallel()
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "old.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"pause not past the lease", []string{"-pause", "4s"}, "must be longer than the report's lease (4s)"},
		{"not loopback", []string{"-http", "0.0.0.0:0"}, "loopback only"},
		{"bad address", []string{"-http", "nowhere"}, "-http"},
		{"data not empty", []string{"-http", "127.0.0.1:0", "-data", full}, "not empty"},
		{"arguments", []string{"story"}, "no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := cli(t, append([]string{"demo"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("demo %v: error %v, want one saying %q", tc.args, err, tc.want)
			}
			if strings.Contains(out, "starting a cluster") {
				t.Errorf("demo %v started a cluster:\n%s", tc.args, out)
			}
		})
	}
	if entries, _ := os.ReadDir(full); len(entries) != 1 {
		t.Errorf("-data %s was changed: %d entries", full, len(entries))
	}
}

// SIGTERM in the middle of the story, while w1 is stopped and its publish
// held: the demo continues and stops every node, and leaves no process
// and no data behind.
func TestDemo_TerminateWhilePaused(t *testing.T) {
	t.Parallel()
	p := startDemo(t, "-http", fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t)), "-pause", "5m")
	p.waitFor(t, "w1 paused right after sending", 3*time.Minute)
	dir := demoDirOf(p.output())
	if dir == "" {
		t.Fatalf("the demo did not say where its cluster lives:\n%s", p.output())
	}
	pids := p.pids()
	p.stop(t, syscall.SIGTERM, "SIGTERM")
	for _, pid := range pids {
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d is still there after the demo exited (%v)", pid, err)
		}
	}
	if left := localcluster.MarkedProcs(demoMarker + "=" + dir); len(left) > 0 {
		t.Errorf("processes of the demo's cluster left: %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo's data %s is still there (%v)", dir, err)
	}
	if out := p.output(); !strings.Contains(out, "stopped.") {
		t.Errorf("the demo did not say it stopped:\n%s", out)
	}
}

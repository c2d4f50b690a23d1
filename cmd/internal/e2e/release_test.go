package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/scheduler/faults"
)

// faultSymbols are functions and variables only the fault hooks have
// (scheduler/faults/on.go), as `go tool nm` names them.
var faultSymbols = []string{
	"github.com/fencecron/fencecron/scheduler/faults.StopBeforePublish",
	"github.com/fencecron/fencecron/scheduler/faults.DropDispatchReply",
	"github.com/fencecron/fencecron/scheduler/faults.errDispatchReplyDropped",
	"github.com/fencecron/fencecron/scheduler/faults.errRenewReplyDropped",
}

// faultStrings are texts only the fault hooks carry: the names of the
// faults and what a node logs or answers when one strikes.
var faultStrings = []string{"stop-before-publish", "drop-dispatch-replies", "drop-renew-replies", "(fault injection)", "FAULT INJECTION ENABLED"}

// anyFaultSymbol matches every symbol of the hooks and their methods, in
// case one is added without a name above.
var anyFaultSymbol = regexp.MustCompile(`fencecron/scheduler/faults\.(\(\*Faults\)\.|DropDispatchReply|DropRenewReply|StopBeforePublish|err\w*Dropped)`)

// A release binary, built as `go build ./cmd/fencecron` builds it, holds
// no fault hook: none of their functions or texts, and it refuses
// FENCECRON_FAULTS instead of ignoring it. The test build (proctest's,
// -tags fencecron_faults) is the control: it holds every symbol and text
// looked for, so their absence means something.
func TestReleaseBuild_HasNoFaultHooks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	release := filepath.Join(t.TempDir(), "fencecron")
	build := exec.Command("go", "build", "-o", release, "github.com/fencecron/fencecron/cmd/fencecron")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	test := proctest.Binary(t)

	symbols := func(bin string) string {
		out, err := exec.Command("go", "tool", "nm", bin).Output()
		if err != nil {
			t.Fatalf("go tool nm %s: %v", bin, err)
		}
		return string(out)
	}
	relSyms, testSyms := symbols(release), symbols(test)
	for _, s := range faultSymbols {
		if !strings.Contains(testSyms, s) {
			t.Errorf("control: the test build lacks %s; update faultSymbols", s)
		}
	}
	if found := anyFaultSymbol.FindAllString(relSyms, -1); len(found) > 0 {
		t.Errorf("the release build has fault hooks: %q", found)
	}
	relBytes, err := os.ReadFile(release)
	if err != nil {
		t.Fatal(err)
	}
	testBytes, err := os.ReadFile(test)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range faultStrings {
		if !bytes.Contains(testBytes, []byte(s)) {
			t.Errorf("control: the test build lacks the text %q; update faultStrings", s)
		}
		if bytes.Contains(relBytes, []byte(s)) {
			t.Errorf("the release build carries the text %q", s)
		}
	}

	// The same config and FENCECRON_FAULTS: the test build runs with the
	// fault, the release build refuses to start.
	path, _ := agentConfig(t, t.TempDir(), "rel1", "release-test-cluster-secret-0123456789", "", "")
	env := append(os.Environ(), "FENCECRON_FAULTS=stop-before-publish=1")
	out, err := runFor(t, release, env, 15*time.Second, "agent", "-config", path)
	if err == nil || !strings.Contains(out, "built without fault hooks") || !strings.Contains(out, faults.BuildTag) {
		t.Errorf("release agent with FENCECRON_FAULTS: %v\n%s\nwant a refusal naming the build tag", err, out)
	}
	out, err = runFor(t, test, env, 3*time.Second, "agent", "-config", path)
	if err != nil || !strings.Contains(out, "FAULT INJECTION ENABLED") {
		t.Errorf("control: the test build's agent with FENCECRON_FAULTS: %v\n%s\nwant it running, saying so", err, out)
	}
}

// runFor runs bin for at most d and returns its output, and its exit
// error; nil if it was still running at d (it is then stopped).
func runFor(t *testing.T, bin string, env []string, d time.Duration, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(d):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return out.String(), nil
	}
}

package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/jobs/executor"
)

func TestRun_CapturesOutputAndExitCode(t *testing.T) {
	res := executor.Run(context.Background(), executor.Request{
		Argv: []string{"/bin/sh", "-c", `echo "a,b"; echo "$GREETING"; echo oops >&2; exit 3`},
		Env:  []string{"GREETING=hello"},
	})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got, want := string(res.Stdout), "a,b\nhello\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := res.ExitCode, 3; got != want {
		t.Errorf("exit code = %d, want %d", got, want)
	}
	if got, want := res.StderrTail, "oops\n"; got != want {
		t.Errorf("stderr tail = %q, want %q", got, want)
	}
	if res.Success() {
		t.Error("a failing command reported success")
	}
}

func TestRun_OutputOverCapIsTruncatedAndNotSuccess(t *testing.T) {
	res := executor.Run(context.Background(), executor.Request{
		Argv:      []string{"/bin/sh", "-c", `head -c 100000 /dev/zero`},
		MaxOutput: 1000,
	})
	if got, want := len(res.Stdout), 1000; got != want {
		t.Errorf("captured %d bytes, want %d", got, want)
	}
	if !res.OutputTruncated || res.Success() {
		t.Errorf("truncated = %v, success = %v; want true, false", res.OutputTruncated, res.Success())
	}
	if res.ExitCode != 0 {
		t.Errorf("exit code = %d: the command must be able to write all its output", res.ExitCode)
	}
}

func TestRun_StderrKeepsTheTail(t *testing.T) {
	res := executor.Run(context.Background(), executor.Request{
		Argv:       []string{"/bin/sh", "-c", `i=0; while [ $i -lt 500 ]; do echo "line $i" >&2; i=$((i+1)); done`},
		StderrTail: 64,
	})
	if len(res.StderrTail) != 64 || !strings.HasSuffix(res.StderrTail, "line 499\n") {
		t.Errorf("stderr tail = %q, want the last 64 bytes ending in line 499", res.StderrTail)
	}
}

// A grandchild that ignores SIGTERM and holds stdout must not survive the
// run, and must not make Run hang.
func TestRun_TimeoutKillsStubbornGrandchild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	script := `sh -c 'trap "" TERM; echo $$ > ` + pidFile + `; while true; do sleep 1; done' &
while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done
trap "" TERM
sleep 100`
	start := time.Now()
	res := executor.Run(context.Background(), executor.Request{
		Argv:    []string{"/bin/sh", "-c", script},
		Timeout: 300 * time.Millisecond,
		Grace:   300 * time.Millisecond,
	})
	if !res.TimedOut {
		t.Errorf("TimedOut = false, want true (result %+v)", res)
	}
	if res.Signal != "killed" {
		t.Errorf("signal = %q, want killed", res.Signal)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Run took %s", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Killed processes are reaped by init; give it a bounded moment.
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d is still alive after the run", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRun_CancelTerminatesGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan executor.Result)
	go func() {
		done <- executor.Run(ctx, executor.Request{Argv: []string{"sleep", "100"}, Grace: time.Second})
	}()
	cancel()
	select {
	case res := <-done:
		if !res.Cancelled || res.Signal != "terminated" {
			t.Errorf("cancelled = %v, signal = %q; want true, terminated", res.Cancelled, res.Signal)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRun_StartFailure(t *testing.T) {
	res := executor.Run(context.Background(), executor.Request{Argv: []string{"/nonexistent/binary"}})
	if res.Err == nil || res.Success() {
		t.Errorf("err = %v, success = %v", res.Err, res.Success())
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

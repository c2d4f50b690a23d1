package executor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencecron/fencecron/jobs/executor"
)

// Run leaves no goroutine behind either.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	// About 590 kB, far beyond the cap and any pipe buffer.
	res := executor.Run(context.Background(), executor.Request{
		Argv:      []string{"seq", "1", "100000"},
		MaxOutput: 1000,
	})
	if got, want := len(res.Stdout), 1000; got != want {
		t.Errorf("captured %d bytes, want %d", got, want)
	}
	var want strings.Builder
	for i := 1; want.Len() < 1000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got := string(res.Stdout); got != want.String()[:1000] {
		t.Errorf("captured output is not the first 1000 bytes: %q...", got[:50])
	}
	if !res.OutputTruncated || res.Success() {
		t.Errorf("truncated = %v, success = %v; want true, false", res.OutputTruncated, res.Success())
	}
	if res.ExitCode != 0 {
		t.Errorf("exit code = %d: the command must be able to write all its output", res.ExitCode)
	}
}

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("the dashboard went away") }

// A live output writer that fails must not stop the capture: the command
// would block on its full pipe until its timeout.
func TestRun_FailingLiveOutputStillDrainsThePipe(t *testing.T) {
	res := executor.Run(context.Background(), executor.Request{
		Argv:    []string{"seq", "1", "100000"}, // about 590 kB
		Stdout:  brokenWriter{},
		Timeout: 20 * time.Second,
	})
	if res.TimedOut || res.ExitCode != 0 {
		t.Fatalf("timed out = %v, exit code = %d: the command could not write all its output", res.TimedOut, res.ExitCode)
	}
	if !strings.HasSuffix(string(res.Stdout), "\n100000\n") {
		t.Errorf("captured output ends %q, want it to end with 100000", res.Stdout[max(len(res.Stdout)-20, 0):])
	}
}

// BenchmarkRun_True is the worker's cost of one short command: its
// allocations are what the node's garbage collector pays per run.
func BenchmarkRun_True(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if res := executor.Run(context.Background(), executor.Request{Argv: []string{"true"}}); !res.Success() {
			b.Fatal(res.Err, res.ExitCode)
		}
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
		Argv: []string{"/bin/sh", "-c", script},
		// Room for the script to start its grandchild and ignore TERM
		// before the timeout, on a busy machine too.
		Timeout: 3 * time.Second,
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
	started := filepath.Join(t.TempDir(), "started")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan executor.Result)
	go func() {
		done <- executor.Run(ctx, executor.Request{Argv: []string{"/bin/sh", "-c", "touch " + started + "; exec sleep 100"}, Grace: 10 * time.Second})
	}()
	waitFile(t, started)
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

// waitGone fails the test unless pid is gone (or a zombie) within a
// bounded time. Killed orphans are reaped by init, not by us.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still alive after the run", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFile waits, bounded, for a file a command under test creates.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A command that exits at once but leaves a background grandchild holding
// its stdout: Run returns without waiting for it, reports the command's
// own exit, and the grandchild goes with the group.
func TestRun_NormalExitKillsLeftoverGrandchild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	script := `(trap "" TERM; echo $(exec sh -c 'echo $PPID') > ` + pidFile + `; exec sleep 300) &
while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done
echo done`
	done := make(chan executor.Result, 1)
	go func() {
		done <- executor.Run(context.Background(), executor.Request{Argv: []string{"/bin/sh", "-c", script}, Timeout: time.Minute})
	}()
	var res executor.Result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run waited for the background grandchild")
	}
	if !res.Success() || string(res.Stdout) != "done\n" {
		t.Errorf("result %+v, want success with stdout done", res)
	}
	waitGone(t, readPid(t, pidFile))
}

// Cancelling the run: the whole group gets SIGTERM, and what ignores it
// gets SIGKILL after the grace period.
func TestRun_CancelKillsStubbornGrandchild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	started := filepath.Join(t.TempDir(), "started")
	script := `sh -c 'trap "" TERM; echo $$ > ` + pidFile + `; while true; do sleep 1; done' &
while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done
trap "" TERM
touch ` + started + `
sleep 100`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan executor.Result, 1)
	go func() {
		done <- executor.Run(ctx, executor.Request{Argv: []string{"/bin/sh", "-c", script}, Grace: 200 * time.Millisecond})
	}()
	// Cancel once the traps are in place.
	waitFile(t, started)
	cancel()
	var res executor.Result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if !res.Cancelled || res.TimedOut || res.Signal != "killed" || res.Success() {
		t.Errorf("cancelled %v, timed out %v, signal %q; want true, false, killed", res.Cancelled, res.TimedOut, res.Signal)
	}
	if res.Duration() <= 0 || !res.Ended.After(res.Started) {
		t.Errorf("duration %s, started %s, ended %s", res.Duration(), res.Started, res.Ended)
	}
	waitGone(t, readPid(t, pidFile))
}

// A process that leaves the group (setsid) and keeps stdout open cannot
// make Run hang: it stops reading after the grace period.
func TestRun_EscapedProcessDoesNotHang(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "escaped.pid")
	script := `setsid sh -c 'echo $$ > ` + pidFile + `; exec sleep 60' &
while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done
echo out`
	done := make(chan executor.Result, 1)
	go func() {
		done <- executor.Run(context.Background(), executor.Request{Argv: []string{"/bin/sh", "-c", script}, Grace: 200 * time.Millisecond})
	}()
	var res executor.Result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run hangs on an escaped process holding its stdout")
	}
	// It is not ours to chase; stop it so the test leaves nothing either.
	pid := readPid(t, pidFile)
	syscall.Kill(pid, syscall.SIGKILL)
	if res.ExitCode != 0 || string(res.Stdout) != "out\n" {
		t.Errorf("exit %d stdout %q, want 0 and out", res.ExitCode, res.Stdout)
	}
	waitGone(t, pid)
}

// The command sees Env, but not the fence variables or the dropped
// secrets the worker itself was started with.
func TestRun_Environment(t *testing.T) {
	t.Setenv("FENCECRON_SECRET", "cluster-secret")
	t.Setenv("FENCECRON_TOKEN", "worker-token")
	t.Setenv("DB_PASSWORD", "hunter2")
	t.Setenv("KEEP_ME", "kept")
	res := executor.Run(context.Background(), executor.Request{
		Argv:    []string{"/bin/sh", "-c", `echo "${FENCECRON_SECRET-unset} ${FENCECRON_TOKEN-unset} ${FENCECRON_JOB-unset} ${DB_PASSWORD-unset} ${KEEP_ME-unset} $GREETING"`},
		Env:     []string{"FENCECRON_TOKEN=attempt-token", "FENCECRON_JOB=report", "GREETING=hi"},
		DropEnv: []string{"DB_PASSWORD"},
	})
	if got, want := string(res.Stdout), "unset attempt-token report unset kept hi\n"; got != want {
		t.Errorf("environment seen = %q, want %q", got, want)
	}
}

func TestRun_DirAndSignalExit(t *testing.T) {
	dir := t.TempDir()
	res := executor.Run(context.Background(), executor.Request{
		Argv: []string{"/bin/sh", "-c", `pwd; kill -USR1 $$`},
		Dir:  dir,
	})
	if got, want := strings.TrimSpace(string(res.Stdout)), dir; got != want {
		t.Errorf("ran in %q, want %q", got, want)
	}
	if res.Signal != "user defined signal 1" || res.ExitCode != -1 || res.Success() {
		t.Errorf("signal %q exit %d; want user defined signal 1, -1", res.Signal, res.ExitCode)
	}
}

func TestRun_NotStartedWhenAlreadyCancelled(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := executor.Run(ctx, executor.Request{Argv: []string{"touch", marker}})
	if !res.Cancelled || res.Err == nil || res.Success() {
		t.Errorf("result %+v, want cancelled with an error", res)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran after its context ended")
	}
}

// A command's standard input is /dev/null, for every command: the file
// is shared, so a run must not close it under the next one.
func TestRun_StdinIsDevNull(t *testing.T) {
	for i := range 3 {
		res := executor.Run(context.Background(), executor.Request{
			Argv: []string{"/bin/sh", "-c", `readlink /proc/self/fd/0; cat`},
		})
		if !res.Success() || string(res.Stdout) != "/dev/null\n" {
			t.Fatalf("run %d: stdout %q, result %+v; want /dev/null and nothing read", i, res.Stdout, res)
		}
	}
}

// OnStart comes once the job's own program runs, not when the start was
// asked for, and only for a start that happened: a job's lateness is
// measured to it.
func TestRun_OnStartOnceTheProgramRuns(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(sleep)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls int
	var exe string
	res := executor.Run(ctx, executor.Request{
		Argv: []string{sleep, "30"},
		OnStart: func(pid int) {
			calls++
			// The forked child has become the job: its executable is
			// sleep, no longer this test's binary.
			exe, err = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			cancel()
		},
	})
	if calls != 1 || err != nil || exe != want {
		t.Fatalf("OnStart called %d times, saw the process run %q (%v); want once, running %q", calls, exe, err, want)
	}
	if !res.Cancelled {
		t.Fatalf("result %+v: want cancelled", res)
	}

	calls = 0
	res = executor.Run(context.Background(), executor.Request{
		Argv:    []string{filepath.Join(t.TempDir(), "missing")},
		OnStart: func(int) { calls++ },
	})
	if res.Err == nil || calls != 0 {
		t.Fatalf("a command that cannot exec: err %v, OnStart called %d times; want an error and no call", res.Err, calls)
	}
}

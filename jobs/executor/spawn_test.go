package executor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fencecron/fencecron/jobs/executor"
)

// niceOf starts a shell that waits to be killed and returns the nice
// value its process had once the start returned (field 19 of
// /proc/PID/stat).
func niceOf(t *testing.T, s *executor.Spawner) int {
	t.Helper()
	n, err := startedNice(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func startedNice(s *executor.Spawner) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nice, err := -1, error(nil)
	res := executor.Run(ctx, executor.Request{
		Argv:    []string{"/bin/sh", "-c", "sleep 30"},
		Spawner: s,
		OnStart: func(pid int) {
			nice, err = procNice(pid)
			cancel()
		},
	})
	if err == nil && nice < 0 {
		err = fmt.Errorf("the command did not start: %+v", res)
	}
	return nice, err
}

func procNice(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:])) // from field 3 on
	if len(f) < 17 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return strconv.Atoi(f[16])
}

func ownNice(t *testing.T) int {
	t.Helper()
	n, err := executor.ThreadNice()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSpawner_ProcessesRunBelowTheCaller(t *testing.T) {
	base := ownNice(t)
	if got := niceOf(t, nil); got != base {
		t.Fatalf("without a spawner the command runs at nice %d, want the caller's %d", got, base)
	}
	s, err := executor.NewSpawner(5)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := min(base+5, executor.MaxNice)
	for range 3 { // every start, not only the first, is lowered
		if got := niceOf(t, s); got != want {
			t.Fatalf("through the spawner the command runs at nice %d once started, want %d", got, want)
		}
	}
	// The caller's own threads are untouched.
	if got := niceOf(t, nil); got != base {
		t.Fatalf("after the spawner, a command started directly runs at nice %d, want %d", got, base)
	}
	if got := ownNice(t); got != base {
		t.Fatalf("the process's nice value moved from %d to %d", base, got)
	}
}

func TestSpawner_ClosedRefusesToStart(t *testing.T) {
	s, err := executor.NewSpawner(1)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close() // twice is harmless
	cmd := exec.Command("/bin/true")
	if err := s.Start(context.Background(), cmd); err == nil {
		cmd.Wait()
		t.Fatal("a closed spawner started a command")
	}
	res := executor.Run(context.Background(), executor.Request{Argv: []string{"/bin/true"}, Spawner: s})
	if res.Err == nil || res.Success() {
		t.Fatalf("Run through a closed spawner = %+v, want a start error", res)
	}
}

// A start whose context has ended does not happen.
func TestSpawner_StartGivesUpWithItsContext(t *testing.T) {
	s, err := executor.NewSpawner(1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cmd := exec.Command("/bin/true")
	if err := s.Start(ctx, cmd); !errors.Is(err, context.Canceled) {
		if err == nil {
			cmd.Wait()
		}
		t.Fatalf("Start with an ended context = %v, want context.Canceled", err)
	}
	if cmd.Process != nil {
		t.Fatal("the command was started")
	}
}

// A node lowered after its spawner was made (renice -g, say) forks its
// jobs already below the jobs' priority: they stay there, and are not
// raised, which without privilege would fail and kill every job.
func TestSpawner_NeverRaisesAJob(t *testing.T) {
	base := ownNice(t)
	if base+3 > executor.MaxNice {
		t.Fatalf("this test needs to run at nice %d or less, not %d", executor.MaxNice-3, base)
	}
	s, err := executor.NewSpawner(1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := make(chan int, 1)
	go func() {
		// A lowered thread cannot be raised again without privilege:
		// locked and never unlocked, it ends with this goroutine.
		runtime.LockOSThread()
		n, err := -1, syscall.Setpriority(syscall.PRIO_PROCESS, 0, base+3)
		if err == nil {
			n, err = startedNice(s)
		}
		if err != nil {
			t.Error(err)
		}
		got <- n
	}()
	if n := <-got; n != base+3 {
		t.Fatalf("a job forked at nice %d runs at %d once started, want it left at %d", base+3, n, base+3)
	}
}

func TestNewSpawner_RefusesARaise(t *testing.T) {
	if _, err := executor.NewSpawner(-1); err == nil {
		t.Fatal("a negative nice (a job above the node) was accepted")
	}
}

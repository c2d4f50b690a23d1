package executor_test

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/jobs/executor"
)

// niceOf runs a shell that prints its own nice value (field 19 of
// /proc/PID/stat) and returns it.
func niceOf(t *testing.T, s *executor.Spawner) int {
	t.Helper()
	res := executor.Run(context.Background(), executor.Request{
		Argv:    []string{"/bin/sh", "-c", `read -r line < /proc/$$/stat; set -- $line; shift 18; echo "$1"`},
		Spawner: s,
	})
	if !res.Success() {
		t.Fatalf("reading the nice value: %+v", res)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("nice value %q: %v", res.Stdout, err)
	}
	return n
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
	for range 3 { // every start, not only the first, is from the lowered thread
		if got := niceOf(t, s); got != want {
			t.Fatalf("through the spawner the command runs at nice %d, want %d", got, want)
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

// A start whose context ended before the spawner took it does not
// happen.
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

func TestNewSpawner_RefusesARaise(t *testing.T) {
	if _, err := executor.NewSpawner(-1); err == nil {
		t.Fatal("a negative nice (a job above the node) was accepted")
	}
}

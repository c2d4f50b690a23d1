package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPrepare_LaysOutWithoutStarting(t *testing.T) {
	dir := t.TempDir()
	c, err := Prepare(Options{Binary: "/nonexistent/fencecron", Dir: dir, Servers: 3, Workers: 1, StoreNode: true, Jobs: "  []\n"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ports := map[int]bool{}
	for _, n := range c.Nodes {
		names = append(names, n.Name)
		if n.Running() {
			t.Errorf("%s runs after Prepare", n.Name)
		}
		for _, p := range []int{n.HTTP, n.Gossip, n.Raft} {
			if ports[p] {
				t.Errorf("port %d used twice", p)
			}
			ports[p] = true
		}
	}
	if got, want := strings.Join(names, ","), "n1,n2,n3,w1,store"; got != want {
		t.Fatalf("nodes %s, want %s", got, want)
	}
	w1 := c.Node("w1")
	cfg := c.Config(w1)
	for _, want := range []string{"name: w1", "server: false", "backend: remote", c.Node("store").URL(), "jobs:\n  []"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("w1's config lacks %q:\n%s", want, cfg)
		}
	}
	if got, want := w1.ConfigPath, filepath.Join(dir, "w1.yaml"); got != want {
		t.Errorf("config path %s, want %s", got, want)
	}
	w1.SetCommand("/bin/true", "A=1")
	if w1.binary != "/bin/true" || len(w1.env) != 1 || w1.env[0] != "A=1" {
		t.Errorf("SetCommand: binary %q env %v", w1.binary, w1.env)
	}
}

// A port another live process has reserved is not handed out; one whose
// owner has exited is taken over.
func TestReserve_SharedAcrossProcesses(t *testing.T) {
	saved := portsDir
	portsDir = t.TempDir()
	defer func() { portsDir = saved }()
	write := func(port int, pid string) {
		if err := os.WriteFile(filepath.Join(portsDir, strconv.Itoa(port)), []byte(pid), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(20001, "1") // init never exits
	if reserve(20001) {
		t.Error("reserved a port that a live process holds")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	write(20002, strconv.Itoa(dead.Process.Pid))
	if !reserve(20002) {
		t.Error("did not take over the port of a process that has exited")
	}
	if !reserve(20003) || reserve(20003) {
		t.Error("a free port: want reserved once, then refused")
	}
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if b, err := os.ReadFile(filepath.Join(portsDir, strconv.Itoa(p))); err != nil || string(b) != strconv.Itoa(os.Getpid()) {
			t.Errorf("port %d: reservation %q, %v; want this process's pid", p, b, err)
		}
	}
}

// UntilProgressStops waits as long as the progress moves, and gives up
// once it stalls.
func TestUntilProgressStops(t *testing.T) {
	n := 0
	err := UntilProgressStops(time.Second, time.Minute, time.Millisecond, func() (int, error) {
		if n++; n < 50 {
			return n, fmt.Errorf("at %d", n)
		}
		return n, nil
	})
	if err != nil || n != 50 {
		t.Errorf("moving: %v after %d polls, want nil after 50", err, n)
	}
	err = UntilProgressStops(20*time.Millisecond, time.Minute, time.Millisecond, func() (int, error) {
		return 7, errors.New("stuck at 7")
	})
	if err == nil || !strings.Contains(err.Error(), "no progress in 20ms: stuck at 7") {
		t.Errorf("stalled: %v, want it to give up naming the stall", err)
	}
}

package localcluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// FreePorts returns n distinct ports on 127.0.0.1 that were free for TCP
// and UDP a moment ago. They are drawn below the kernel's ephemeral range
// (32768 and up on Linux), so the outgoing connections of busy test
// processes cannot take them between this check and a node's bind, and
// each is reserved for this process (see reserve), so another test
// process drawing ports at the same time cannot either.
func FreePorts(n int) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for tries := 0; len(out) < n; tries++ {
		if tries > 10000 {
			return nil, fmt.Errorf("no free ports found below 32768")
		}
		p := 20000 + rand.IntN(12000)
		if seen[p] {
			continue
		}
		seen[p] = true
		if portFree(p) == nil && reserve(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// PortsFrom returns the n ports base, base+1, ..., after checking that
// each is free for TCP and UDP on 127.0.0.1 and reserving it (see
// reserve); the error names the first that is not, and what to do.
func PortsFrom(base, n int) ([]int, error) {
	if base < 1024 || base+n-1 > 65535 {
		return nil, fmt.Errorf("ports %d-%d: choose a base port from 1024 to %d (the cluster takes %d consecutive ports)", base, base+n-1, 65535-n+1, n)
	}
	out := make([]int, 0, n)
	for p := base; p < base+n; p++ {
		if err := portFree(p); err != nil {
			return nil, fmt.Errorf("port %d (of %d-%d) is taken (%v): choose another base port", p, base, base+n-1, err)
		}
		reserve(p)
		out = append(out, p)
	}
	return out, nil
}

// portFree reports whether p is free for TCP and UDP on 127.0.0.1 (gossip
// uses both).
func portFree(p int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return err
	}
	ln.Close()
	pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return err
	}
	return pc.Close()
}

// portsDir holds one file per reserved port, naming the process that
// reserved it. `go test ./...` runs packages in parallel processes, and a
// port one of them has drawn but not yet bound (a forwarder, a node still
// starting, a node being restarted) looks free to the others.
var portsDir = filepath.Join(os.TempDir(), "fencecron-test-ports")

// reserve claims port p for this process for as long as it lives. A
// reservation whose process has exited is taken over.
func reserve(p int) bool {
	if err := os.MkdirAll(portsDir, 0o777); err != nil {
		return true // no registry: the bind check above is all there is
	}
	path := filepath.Join(portsDir, strconv.Itoa(p))
	for range 2 {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprint(f, os.Getpid())
			f.Close()
			return true
		}
		b, rerr := os.ReadFile(path)
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if rerr != nil || perr != nil || pid == os.Getpid() {
			return false
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			return false // its owner lives
		}
		os.Remove(path)
	}
	return false
}

// ReserveRange reserves for this process the n ports from base, if each
// is free for TCP and UDP on 127.0.0.1 and none is reserved already, by
// another process or by this one: a test drawing a range while another
// test of its process holds a port of it, drawn but not yet bound by a
// node still starting, would otherwise take it (PortsFrom, for a user's
// choice, takes a port reserved for it). Ports reserved before the one
// refused stay reserved.
func ReserveRange(base, n int) error {
	for p := base; p < base+n; p++ {
		if err := portFree(p); err != nil {
			return fmt.Errorf("port %d is taken: %w", p, err)
		}
	}
	for p := base; p < base+n; p++ {
		if !reserve(p) {
			return fmt.Errorf("port %d is reserved", p)
		}
	}
	return nil
}

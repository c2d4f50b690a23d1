package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// network is where the nodes live and how the nemesis cuts links between
// them.
type network interface {
	// Name says which kind: "netns" or "loopback".
	Name() string
	// IP is the address a node binds and advertises.
	IP(node string) string
	// HostIP is the harness's own address as the nodes reach it.
	HostIP() string
	// Wrap returns the program that runs node's binary in its place
	// (binary itself when nothing is needed).
	Wrap(node, binary string) (string, error)
	// CanPartition reports whether Cut works.
	CanPartition() bool
	// Cut stops all traffic between a and b, both ways; Mend restores
	// every cut link.
	Cut(a, b string) error
	Mend() error
	// Close removes what the network created.
	Close() error
}

var errNoPartitions = errors.New("this network cannot partition (run as root with iproute2 for -net netns)")

// loopback is every node on 127.0.0.1: portable, no partitions.
type loopback struct{}

func (loopback) Name() string                          { return "loopback" }
func (loopback) IP(string) string                      { return "127.0.0.1" }
func (loopback) HostIP() string                        { return "127.0.0.1" }
func (loopback) Wrap(_, binary string) (string, error) { return binary, nil }
func (loopback) CanPartition() bool                    { return false }
func (loopback) Cut(a, b string) error                 { return errNoPartitions }
func (loopback) Mend() error                           { return nil }
func (loopback) Close() error                          { return nil }

// netns gives every node its own network namespace with one veth into a
// bridge the harness owns, on a private /24. A partition is a blackhole
// route on each side, so it covers every protocol between two nodes
// (gossip over UDP and TCP, Raft, the internal HTTP API) and nothing
// else: the store proxy on the bridge stays reachable. A node's own
// connect to a cut peer fails at once; the peer's packets to it are
// dropped silently, so established connections hang as in a real
// partition.
type netns struct {
	id     string
	dir    string
	prefix string // "10.a.b."
	bridge string
	nodes  map[string]int // node -> host number on the subnet
	mu     sync.Mutex
	cuts   map[[2]string]bool
}

// netnsAvailable reports why netns cannot be used, or nil.
func netnsAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("no ip command (iproute2)")
	}
	return nil
}

// newNetns creates the bridge and a namespace per node. Names carry a
// random id, so concurrent harnesses never share anything.
func newNetns(dir string, nodes []string) (_ *netns, err error) {
	if err := netnsAvailable(); err != nil {
		return nil, err
	}
	b := make([]byte, 3)
	rand.Read(b)
	n := &netns{id: hex.EncodeToString(b), dir: dir, nodes: map[string]int{}, cuts: map[[2]string]bool{}}
	n.bridge = "fcb" + n.id
	if n.prefix, err = freeSubnet(b); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := ip("link", "add", n.bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	if err := ip("addr", "add", n.prefix+"1/24", "dev", n.bridge); err != nil {
		return nil, err
	}
	if err := ip("link", "set", n.bridge, "up"); err != nil {
		return nil, err
	}
	for i, name := range nodes {
		host := 10 + i
		n.nodes[name] = host
		ns, veth := n.ns(name), fmt.Sprintf("fcv%s%02d", n.id, i)
		for _, args := range [][]string{
			{"netns", "add", ns},
			{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"link", "set", veth, "master", n.bridge, "up"},
			{"-n", ns, "addr", "add", fmt.Sprintf("%s%d/24", n.prefix, host), "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := ip(args...); err != nil {
				return nil, err
			}
		}
	}
	return n, nil
}

// freeSubnet picks 10.a.b.0/24 (from the random bytes) that no interface
// or route here uses.
func freeSubnet(seed []byte) (string, error) {
	out, _ := exec.Command("ip", "-4", "route", "show", "table", "all").CombinedOutput()
	addrs, _ := exec.Command("ip", "-4", "addr").CombinedOutput()
	used := string(out) + string(addrs)
	a, b := 100+int(seed[0])%100, int(seed[1])
	for range 256 {
		p := fmt.Sprintf("10.%d.%d.", a, b)
		if !strings.Contains(used, p) {
			return p, nil
		}
		b = (b + 1) % 256
	}
	return "", errors.New("no free 10.x.y.0/24 subnet")
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (n *netns) ns(node string) string { return "fc" + n.id + "-" + node }

func (n *netns) Name() string { return "netns" }

func (n *netns) IP(node string) string { return fmt.Sprintf("%s%d", n.prefix, n.nodes[node]) }

func (n *netns) HostIP() string { return n.prefix + "1" }

func (n *netns) CanPartition() bool { return true }

// Wrap writes a script that runs binary inside node's namespace; exec
// keeps the process id, so signals reach the node itself.
func (n *netns) Wrap(node, binary string) (string, error) {
	if err := os.MkdirAll(filepath.Join(n.dir, "bin"), 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(n.dir, "bin", node+".sh")
	script := fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %q \"$@\"\n", n.ns(node), binary)
	return path, os.WriteFile(path, []byte(script), 0o755)
}

func (n *netns) Cut(a, b string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.nodes[a]; !ok {
		return fmt.Errorf("no node %s", a)
	}
	if _, ok := n.nodes[b]; !ok {
		return fmt.Errorf("no node %s", b)
	}
	for _, l := range [][2]string{{a, b}, {b, a}} {
		if err := ip("-n", n.ns(l[0]), "route", "replace", "blackhole", n.IP(l[1])+"/32"); err != nil {
			return err
		}
		n.cuts[l] = true
	}
	return nil
}

func (n *netns) Mend() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	links := make([][2]string, 0, len(n.cuts))
	for l := range n.cuts {
		links = append(links, l)
	}
	sort.Slice(links, func(i, j int) bool { return links[i][0]+links[i][1] < links[j][0]+links[j][1] })
	for _, l := range links {
		if err := ip("-n", n.ns(l[0]), "route", "del", "blackhole", n.IP(l[1])+"/32"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(n.cuts, l)
	}
	return errors.Join(errs...)
}

// Close deletes the namespaces (their veths go with them) and the bridge.
// Processes still inside keep their namespace alive until they exit.
func (n *netns) Close() error {
	var errs []error
	for node := range n.nodes {
		if err := ip("netns", "del", n.ns(node)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := ip("link", "del", n.bridge); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

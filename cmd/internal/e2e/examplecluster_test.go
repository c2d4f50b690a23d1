package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fencecron/fencecron/cmd/internal/config"
)

// The README's three-node cluster (and its store node) never meets `fencecron dev`: no port
// in common with dev's defaults or with each other, data folders apart
// from dev's, and each node joins the other two at their gossip ports.
func TestExampleCluster_ApartFromDev(t *testing.T) {
	t.Setenv("FENCECRON_SECRET", "example-cluster-test-secret-0123456789abcdef")
	used := map[int]string{
		config.DefaultHTTPPort: "dev's HTTP", config.DefaultGossipPort: "dev's gossip", config.DefaultRaftPort: "dev's Raft",
	}
	gossip := map[string]string{}
	files := map[string]*config.File{}
	for _, n := range []string{"n1", "n2", "n3", "store"} {
		f, err := config.Load(filepath.Join("../../../deploy/examples/cluster", n+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		files[n] = f
		for what, p := range map[string]int{"http": f.Node.Ports.HTTP, "gossip": f.Node.Ports.Gossip, "raft": f.Node.Ports.Raft} {
			if other, ok := used[p]; ok {
				t.Errorf("%s's %s port %d is also %s", n, what, p, other)
			}
			used[p] = fmt.Sprintf("%s's %s", n, what)
		}
		gossip[n] = "127.0.0.1:" + strconv.Itoa(f.Node.Ports.Gossip)
		devData := filepath.Join(os.TempDir(), "fencecron-dev")
		if d := filepath.Clean(f.Node.DataDir); strings.HasPrefix(d, devData) || strings.HasPrefix(devData, d) {
			t.Errorf("%s's data_dir %s meets dev's %s", n, d, devData)
		}
	}
	for n, f := range files {
		for m, addr := range gossip {
			if m != n && !slices.Contains(f.Node.Join, addr) {
				t.Errorf("%s does not join %s at %s (join: %v)", n, m, addr, f.Node.Join)
			}
		}
	}
}

// The README and the example configs never show a secret to copy: where
// one is needed they generate it, once, to be shared by every node. A
// written-out example secret ends up in use, and a per-node
// $(openssl rand ...) gives each node its own, which never forms a
// cluster.
func TestReadme_SecretsAreGenerated(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../../deploy/examples/cluster/*.yaml")
	files = append(files, "../../../README.md")
	assign := regexp.MustCompile(`FENCECRON_SECRET=(\S*)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range assign.FindAllStringSubmatch(string(b), -1) {
			if !strings.HasPrefix(m[1], "$(") {
				t.Errorf("%s: %s: a written-out secret; generate it (openssl rand -hex 32)", f, m[0])
			}
			if strings.HasPrefix(m[1], "$(openssl") && !strings.Contains(string(b), "once") {
				t.Errorf("%s: %s without saying to make it once and share it", f, m[0])
			}
		}
		if strings.Contains(string(b), "FENCECRON_SECRET=$(openssl rand -hex 32) fencecron agent") {
			t.Errorf("%s: a fresh secret per agent: every node would get its own", f)
		}
	}
}

package localcluster

import (
	"path/filepath"
	"strings"
	"testing"
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

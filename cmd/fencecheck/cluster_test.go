package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/localcluster"
)

// A config placed on a network binds the node's own address, dials every
// peer at its address, reaches the store through the proxy, keeps every
// decision, and is still a valid config.
func TestPlaceConfig(t *testing.T) {
	dir := t.TempDir()
	c, err := localcluster.Prepare(localcluster.Options{Binary: "fencecron", Dir: dir, Servers: 3, Workers: 2, StoreNode: true, Jobs: jobsYAML(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{"n1": "10.9.9.10", "n2": "10.9.9.11", "n3": "10.9.9.12", "w1": "10.9.9.13", "w2": "10.9.9.14", "store": "10.9.9.15"}
	owner := map[int]string{}
	for _, n := range c.Nodes {
		for _, p := range []int{n.HTTP, n.Gossip, n.Raft} {
			owner[p] = n.Name
		}
	}
	store := c.Node("store")
	for _, name := range []string{"w1", "store"} {
		n := c.Node(name)
		cfg := placeConfig(c.Config(n), name, func(n string) string { return ips[n] }, owner, store.HTTP, "http://10.9.9.1:4444")
		if strings.Contains(cfg, "127.0.0.1") {
			t.Errorf("%s: loopback left in\n%s", name, cfg)
		}
		want := []string{"bind: " + ips[name], "history_retention: 10000000"}
		if name == "w1" {
			want = append(want, `url: "http://10.9.9.1:4444"`, ips["n1"]+":", ips["store"]+":")
		}
		for _, w := range want {
			if !strings.Contains(cfg, w) {
				t.Errorf("%s: no %q in\n%s", name, w, cfg)
			}
		}
		path := filepath.Join(dir, name+".yaml")
		os.WriteFile(path, []byte(cfg), 0o600)
		if _, err := config.Load(path); err != nil {
			t.Errorf("%s: placed config does not load: %v\n%s", name, err, cfg)
		}
	}
}

// The same seed gives the same schedule; every kind comes up in a
// minute; partitions only when the network can make them.
func TestSchedule(t *testing.T) {
	a := Schedule(7, time.Minute, 2*time.Second, true)
	b := Schedule(7, time.Minute, 2*time.Second, true)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7 gave two schedules:\n%v\n%v", a, b)
	}
	if c := Schedule(8, time.Minute, 2*time.Second, true); reflect.DeepEqual(a, c) {
		t.Error("seeds 7 and 8 gave the same schedule")
	}
	kinds := map[string]bool{}
	var end time.Duration
	for i, op := range a {
		kinds[op.Kind] = true
		if op.At < end {
			t.Errorf("op %d starts at %s, before the previous one ended at %s", i, op.At, end)
		}
		end = op.At + op.For
	}
	if end > time.Minute {
		t.Errorf("the schedule ends at %s, after the duration", end)
	}
	for _, k := range faultKinds {
		if !kinds[k.name] && len(a) >= len(faultKinds) {
			t.Errorf("no %s in a one-minute schedule", k.name)
		}
	}
	for _, op := range Schedule(7, time.Hour, 2*time.Second, false) {
		if strings.HasPrefix(op.Kind, "partition") {
			t.Fatalf("a partition (%s) in a schedule without partitions", op.Kind)
		}
	}
}

// Namespaces: nodes reach each other and the host, and a cut stops
// traffic both ways until mended. Needs root and iproute2.
func TestNetns_CutAndMend(t *testing.T) {
	if err := netnsAvailable(); err != nil {
		t.Skipf("network namespaces: %v", err)
	}
	n, err := newNetns(t.TempDir(), []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	}()
	// A listener in b, dialled from a.
	reach := func() bool {
		script := "exec 3<>/dev/tcp/" + n.IP("b") + "/1"
		// Port 1 is closed: a refusal proves the path works, a blackhole
		// fails differently and fast.
		out, _ := exec.Command("ip", "netns", "exec", n.ns("a"), "bash", "-c", script).CombinedOutput()
		return strings.Contains(string(out), "refused")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	if !reach() {
		t.Fatal("a cannot reach b")
	}
	if err := n.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	if reach() {
		t.Fatal("a reaches b across a cut")
	}
	if err := n.Mend(); err != nil {
		t.Fatal(err)
	}
	if !reach() {
		t.Fatal("a cannot reach b after mending")
	}
}

// -plan prints what -seed replays, and bad flags exit 2.
func TestRun_PlanAndFlags(t *testing.T) {
	var out, errOut strings.Builder
	code, err := run(t.Context(), []string{"-plan", "-seed", "4", "-duration", "30s", "-net", "loopback"}, &out, &errOut)
	if err != nil || code != 0 {
		t.Fatalf("-plan: code %d, %v", code, err)
	}
	var want strings.Builder
	for _, op := range Schedule(4, 30*time.Second, 2*time.Second, false) {
		want.WriteString(op.String() + "\n")
	}
	if got := out.String(); got != want.String() || got == "" {
		t.Errorf("-plan printed\n%s\nwant\n%s", got, want.String())
	}
	if code, _ := run(t.Context(), []string{"-duration", "0s"}, &out, &errOut); code != 2 {
		t.Errorf("-duration 0s: code %d, want 2", code)
	}
}

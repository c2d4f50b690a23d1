package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// The tests of a new user's first hour (issue 35): what they type, on
// ports of their choosing, and what they read back.

// freeRange returns a base port whose n consecutive ports are free (and
// reserved for this test process), below the ephemeral range.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for range 200 {
		base := 20000 + rand.IntN(12000-n)
		if localcluster.ReserveRange(base, n) == nil {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports found between 20000 and 31999", n)
	return 0
}

var demoPortsRE = regexp.MustCompile(`http 127\.0\.0\.1:(\d+)  gossip (\d+)  raft (\d+)`)

// `demo -base-port N` puts all six nodes and the store link on the 19
// ports from N, and the cluster forms there.
func TestDemo_BasePort(t *testing.T) {
	t.Parallel()
	base := freeRange(t, 19)
	p := startDemo(t, "-http", fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t)), "-base-port", strconv.Itoa(base))
	p.waitFor(t, "the cluster is ready", 3*time.Minute)
	out := p.output()
	var ports []int
	for _, m := range demoPortsRE.FindAllStringSubmatch(out, -1) {
		for _, s := range m[1:] {
			n, _ := strconv.Atoi(s)
			ports = append(ports, n)
		}
	}
	link := regexp.MustCompile(`the demo's link https://127\.0\.0\.1:(\d+)`).FindStringSubmatch(out)
	if len(ports) != 18 || link == nil {
		t.Fatalf("the demo printed %d node ports and link %v, want 18 and one:\n%s", len(ports), link, out)
	}
	n, _ := strconv.Atoi(link[1])
	ports = append(ports, n)
	sort.Ints(ports)
	for i, p := range ports {
		if p != base+i {
			t.Errorf("ports %v, want %d to %d, each once", ports, base, base+18)
			break
		}
	}
	// The nodes answer where the demo says they are, each knowing the
	// leader (once any election the busy machine caused is over).
	for _, m := range demoPortsRE.FindAllStringSubmatch(out, -1) {
		proctest.Eventually(t, 30*time.Second, "the node at "+m[1]+" knows the leader", func() error {
			var st wire.Status
			if err := proctest.GetJSON("http://127.0.0.1:"+m[1]+"/api/v1/status", &st); err != nil {
				return err
			}
			if st.Leader == "" {
				return fmt.Errorf("no leader known")
			}
			return nil
		})
	}
	p.stop(t, syscall.SIGINT, "Ctrl-C")
}

// A taken port in the -base-port range stops the demo before any node
// starts, naming the port and what to do.
func TestDemo_BasePortTaken(t *testing.T) {
	t.Parallel()
	base := freeRange(t, 19)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+4))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = cli(t, "demo", "-http", fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t)), "-base-port", strconv.Itoa(base))
	want := fmt.Sprintf("-base-port %d: port %d (of %d-%d) is taken", base, base+4, base, base+17)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "choose another base port") {
		t.Errorf("demo with port %d taken: %v, want %q and the next step", base+4, err, want)
	}
	if out, err := cli(t, "demo", "-base-port", "80"); err == nil || !strings.Contains(err.Error(), "choose a base port from 1024") {
		t.Errorf("demo -base-port 80: %v\n%s", err, out)
	}
}

// With FENCECRON_ADDR set, `dev` listens there and every command finds it
// there without -addr; a manual run's id, pasted into explain as the
// README suggests, names that run.
func TestDev_FencecronAddr(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	env := []string{"FENCECRON_ADDR=" + addr}
	proctest.StartEnv(t, "dev", env, "dev", "-data", t.TempDir(),
		"-raft-port", strconv.Itoa(proctest.FreePort(t)), "-gossip-port", strconv.Itoa(proctest.FreePort(t)))
	proctest.Eventually(t, 60*time.Second, "dev ready at $FENCECRON_ADDR", func() error {
		_, _, err := proctest.Get("http://" + addr + "/readyz")
		return err
	})
	out, err := cliEnv(t, env, "status")
	if err != nil || !strings.Contains(out, "leader dev; epoch") {
		t.Fatalf("status with FENCECRON_ADDR: %v\n%s", err, out)
	}
	out, err = cliEnv(t, env, "trigger", "-force", "report") // report fires every few seconds: -force, whatever is open
	m := regexp.MustCompile(`run (report@\S+): attempt 1`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("trigger report with FENCECRON_ADDR: %v\n%s", err, out)
	}
	id := m[1]
	out, err = cliEnv(t, env, "explain", id)
	if err != nil || !strings.Contains(out, "run "+id+": ") || !strings.Contains(out, "a manual run, not a fire time of the schedule") || strings.Contains(out, "not a fire time of report") {
		t.Errorf("explain %s: %v\n%s", id, err, out)
	}
	if _, err := cliEnv(t, env, "runs", "report"); err != nil {
		t.Errorf("runs with FENCECRON_ADDR: %v", err)
	}
}

// freePortPrefix returns a FENCECRON_PORT_PREFIX under which the example
// cluster's 14 ports (PREFIX71 to PREFIX84) are free and reserved for
// this test process.
func freePortPrefix(t *testing.T) int {
	t.Helper()
	for range 200 {
		p := 200 + rand.IntN(119)
		if localcluster.ReserveRange(p*100+71, 14) == nil {
			return p
		}
	}
	t.Fatal("no free port prefix found")
	return 0
}

// The README's example cluster, as a new user runs it: the four files of
// deploy/examples/cluster with one shared secret, moved to a port range of
// their own by FENCECRON_PORT_PREFIX. Its store node is not a server, so
// killing any server, n1 included, leaves the runs publishing.
func TestExampleCluster_MovedPortsSurviveN1(t *testing.T) {
	t.Parallel()
	prefix := freePortPrefix(t)
	env := []string{
		"FENCECRON_PORT_PREFIX=" + strconv.Itoa(prefix),
		"FENCECRON_CLUSTER_DIR=" + t.TempDir(),
		"FENCECRON_SECRET=example-cluster-e2e-secret-" + strconv.Itoa(rand.Int()),
	}
	procs := map[string]*proctest.Proc{}
	for _, n := range []string{"store", "n1", "n2", "n3"} {
		procs[n] = proctest.StartEnv(t, n, env, "agent", "-config", "../../../deploy/examples/cluster/"+n+".yaml")
	}
	addr := func(n string) string {
		return fmt.Sprintf("127.0.0.1:%d%d", prefix, map[string]int{"n1": 81, "n2": 82, "n3": 83, "store": 84}[n])
	}
	// A report scheduled after since and published, seen from n.
	published := func(n string, since time.Time) {
		proctest.Eventually(t, 90*time.Second, "a report published through "+n, func() error {
			var out struct{ Runs []jobs.Run }
			if err := proctest.GetJSON("http://"+addr(n)+"/api/v1/runs?job=report&limit=20", &out); err != nil {
				return err
			}
			for _, r := range out.Runs {
				if a, ok := r.Latest(); ok && r.State == jobs.Succeeded && a.StoreOutcome == "applied" && r.ScheduledAt.After(since) {
					return nil
				}
			}
			return fmt.Errorf("%d report runs, none scheduled after %s and published", len(out.Runs), since.Format(time.RFC3339))
		})
	}
	published("n2", time.Time{})
	out, err := cliEnv(t, env, "status", "-addr", addr("n2"))
	if err != nil || !strings.Contains(out, "store") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	// n1 served the store before; now it is one more server to lose.
	procs["n1"].Signal(syscall.SIGKILL)
	if _, ok := procs["n1"].Wait(10 * time.Second); !ok {
		t.Fatal("n1 did not die")
	}
	published("n3", time.Now())
}

// Two nodes started with different secrets never form a cluster; each
// says why, at WARN, in words that name the secret (not memberlist's "no
// installed keys could decrypt the message" at ERROR), and status says why
// there is no leader.
func TestAgent_DifferentSecretsSaySo(t *testing.T) {
	t.Parallel()
	ports := map[string][3]int{}
	for _, n := range []string{"n1", "n2"} {
		ports[n] = [3]int{proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)}
	}
	procs := map[string]*proctest.Proc{}
	for i, n := range []string{"n1", "n2"} {
		other := map[string]string{"n1": "n2", "n2": "n1"}[n]
		cfg := fmt.Sprintf(`node:
  name: %s
  data_dir: %q
  bind: 127.0.0.1
  ports: {http: %d, gossip: %d, raft: %d}
  join: ["127.0.0.1:%d"]
  bootstrap_expect: 2
cluster:
  secret: %q
`, n, t.TempDir(), ports[n][0], ports[n][1], ports[n][2], ports[other][1], fmt.Sprintf("secret-of-%s-%d-0123456789abcdefghij", n, i))
		path := filepath.Join(t.TempDir(), n+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[n] = proctest.Start(t, n, "agent", "-config", path)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports["n1"][0])
	var out string
	proctest.Eventually(t, 60*time.Second, "status of n1 naming the secret", func() error {
		var err error
		out, err = cli(t, "status", "-addr", addr)
		if err != nil {
			return err
		}
		if !strings.Contains(out, "leader (none)") || !strings.Contains(out, "no leader: gossip from ") || !strings.Contains(out, "different cluster.secret") {
			return fmt.Errorf("status:\n%s", out)
		}
		return nil
	})
	for n, p := range procs {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		var warned bool
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "probably has a different cluster.secret") {
				warned = true
			}
			if strings.Contains(line, "level=ERROR") && strings.Contains(line, "decrypt") {
				t.Errorf("%s logs the decryption failure at ERROR: %s", n, line)
			}
		}
		if !warned && n == "n1" {
			t.Errorf("%s never warned that its peer probably has a different cluster.secret", n)
		}
	}
}

// A planned stop logs no ERROR for what a clean stop does: the
// connections it closes under Raft's and gossip's readers are INFO. (What
// the leader logs while a server is down is TestLogTriage's, in election.)
func TestCluster_PlannedStopLogsNoError(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, Profile: "default"})
	a := agree(t, c, 30*time.Second)
	for _, n := range c.Servers() {
		if n.Name == a.Leader {
			continue
		}
		if err := n.Terminate(15 * time.Second); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "msg=stopped") {
			t.Errorf("%s did not stop cleanly", n.Name)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(line, "level=ERROR") {
				t.Errorf("%s's planned stop logged an ERROR: %s", n.Name, line)
			}
		}
		return
	}
}

// Package container_test checks deploy/container without a container
// engine: the build the Containerfile makes is static, and the
// Containerfile, the compose file and the node config they share agree.
package container_test

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/deploy/internal/deploytest"
)

// TestBuild_Static builds the binary as the Containerfile does and checks
// it is statically linked: no ELF interpreter (PT_INTERP), no dynamic
// section, no shared library needed. Such a binary runs on any base image.
func TestBuild_Static(t *testing.T) {
	cf := containerfile(t)
	build := ""
	for _, in := range cf {
		if in.op == "RUN" && strings.Contains(in.args, "go build") {
			build = in.args
		}
	}
	if !strings.Contains(build, "CGO_ENABLED=0 go build") {
		t.Fatalf("the Containerfile's go build %q does not set CGO_ENABLED=0", build)
	}
	bin := deploytest.Build(t, t.TempDir(), "CGO_ENABLED=0")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: dynamically linked", p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Error("the binary has a .dynamic section")
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
}

// instruction is one Containerfile instruction, continuation lines joined.
type instruction struct{ op, args string }

func containerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	cur := ""
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur == "") {
			continue
		}
		cur += strings.TrimSuffix(trimmed, "\\") + " "
		if strings.HasSuffix(trimmed, "\\") {
			continue
		}
		op, args, _ := strings.Cut(strings.TrimSpace(cur), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args)})
		cur = ""
	}
	return out
}

// finalStage is the instructions after the last FROM: what the image is.
func finalStage(cf []instruction) []instruction {
	last := 0
	for i, in := range cf {
		if in.op == "FROM" {
			last = i
		}
	}
	return cf[last:]
}

func jsonArgs(t *testing.T, s string) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%q: want the exec (JSON) form: %v", s, err)
	}
	return v
}

// The config every container reads.
type nodeConfig struct {
	Node struct {
		DataDir string `yaml:"data_dir"`
		Bind    string `yaml:"bind"`
		Ports   struct {
			HTTP, Gossip, Raft int
		} `yaml:"ports"`
		Join            []string `yaml:"join"`
		BootstrapExpect int      `yaml:"bootstrap_expect"`
	} `yaml:"node"`
	Store struct {
		Backend string `yaml:"backend"`
	} `yaml:"store"`
}

func readConfig(t *testing.T) (nodeConfig, string) {
	t.Helper()
	data, err := os.ReadFile("fencecron.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c nodeConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c, string(data)
}

func TestContainerfile_Image(t *testing.T) {
	cfg, _ := readConfig(t)
	img := finalStage(containerfile(t))
	get := func(op string) []string {
		var v []string
		for _, in := range img {
			if in.op == op {
				v = append(v, in.args)
			}
		}
		return v
	}
	// Non-root, by number, so Kubernetes' runAsNonRoot can check it.
	users := get("USER")
	if len(users) == 0 {
		t.Fatal("the image runs as root: no USER")
	}
	uid, _, _ := strings.Cut(users[len(users)-1], ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %s: want a numeric uid other than 0", users[len(users)-1])
	}
	if vols := get("VOLUME"); len(vols) != 1 || !slices.Equal(jsonArgs(t, vols[0]), []string{cfg.Node.DataDir}) {
		t.Errorf("VOLUME %v; want [%q], node.data_dir", vols, cfg.Node.DataDir)
	}
	// The entrypoint is the binary the build stage copied in.
	entry := get("ENTRYPOINT")
	if len(entry) != 1 {
		t.Fatalf("ENTRYPOINT %v", entry)
	}
	binary := jsonArgs(t, entry[0])[0]
	copied := false
	for _, c := range get("COPY") {
		copied = copied || strings.HasSuffix(c, " "+binary)
	}
	if !copied {
		t.Errorf("ENTRYPOINT %s is not what a COPY puts in the image", binary)
	}
	// The health check asks the binary itself for /readyz on the http port.
	hc := get("HEALTHCHECK")
	if len(hc) != 1 {
		t.Fatalf("HEALTHCHECK %v", hc)
	}
	_, cmd, ok := strings.Cut(hc[0], "CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %q has no CMD", hc[0])
	}
	checkHealth(t, "HEALTHCHECK", jsonArgs(t, cmd), binary, cfg.Node.Ports.HTTP)
	// EXPOSE names the config's ports.
	exposed := strings.Join(get("EXPOSE"), " ")
	for _, p := range []string{
		fmt.Sprintf("%d/tcp", cfg.Node.Ports.HTTP), fmt.Sprintf("%d/tcp", cfg.Node.Ports.Gossip),
		fmt.Sprintf("%d/udp", cfg.Node.Ports.Gossip), fmt.Sprintf("%d/tcp", cfg.Node.Ports.Raft),
	} {
		if !slices.Contains(strings.Fields(exposed), p) {
			t.Errorf("EXPOSE %q lacks %s", exposed, p)
		}
	}
	if got := get("CMD"); len(got) != 1 || !slices.Equal(jsonArgs(t, got[0]), []string{"agent", "-config", "/etc/fencecron/fencecron.yaml"}) {
		t.Errorf("CMD %v; want agent -config /etc/fencecron/fencecron.yaml", got)
	}
}

// checkHealth checks a health command: `BINARY health -addr 127.0.0.1:PORT`.
func checkHealth(t *testing.T, where string, argv []string, binary string, port int) {
	t.Helper()
	if want := []string{binary, "health", "-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}; !slices.Equal(argv, want) {
		t.Errorf("%s runs %v; want %v", where, argv, want)
	}
}

// The compose file's parts the checks read.
type compose struct {
	Services map[string]struct {
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Image       string            `yaml:"image"`
		Environment map[string]string `yaml:"environment"`
		Networks    map[string]struct {
			IPv4 string `yaml:"ipv4_address"`
		} `yaml:"networks"`
		Ports       []string `yaml:"ports"`
		Volumes     []string `yaml:"volumes"`
		StopGrace   string   `yaml:"stop_grace_period"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
	Volumes  map[string]any `yaml:"volumes"`
	Networks map[string]any `yaml:"networks"`
}

var nodeService = regexp.MustCompile(`^n[0-9]+$`)

func TestCompose_Consistent(t *testing.T) {
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	cfg, text := readConfig(t)
	pg, ok := c.Services["postgres"]
	if !ok || pg.Healthcheck == nil {
		t.Fatal("compose.yaml needs a postgres service with a health check")
	}
	var nodes []string
	for name := range c.Services {
		if nodeService.MatchString(name) {
			nodes = append(nodes, name)
		}
	}
	slices.Sort(nodes)
	if len(nodes) != 3 || cfg.Node.BootstrapExpect != 3 {
		t.Fatalf("fencecron services %v, bootstrap_expect %d; want three of each", nodes, cfg.Node.BootstrapExpect)
	}
	var join []string
	for _, n := range nodes {
		join = append(join, fmt.Sprintf("%s:%d", n, cfg.Node.Ports.Gossip))
	}
	if !slices.Equal(cfg.Node.Join, join) {
		t.Errorf("node.join %v; want the services by name: %v", cfg.Node.Join, join)
	}
	if cfg.Store.Backend != "postgres" {
		t.Errorf("store.backend %q; want postgres, the compose file's store", cfg.Store.Backend)
	}
	vars := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(text, -1)
	hostPorts := map[string]bool{}
	for _, name := range nodes {
		s := c.Services[name]
		t.Run(name, func(t *testing.T) {
			if s.Build == nil || s.Build.Dockerfile != "deploy/container/Containerfile" {
				t.Errorf("build %+v; want deploy/container/Containerfile", s.Build)
			} else if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("build: %v", err)
			}
			if s.Healthcheck == nil {
				t.Fatal("no health check")
			}
			if len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
				t.Fatalf("healthcheck %v: want the CMD form", s.Healthcheck.Test)
			}
			checkHealth(t, "healthcheck", s.Healthcheck.Test[1:], "/usr/local/bin/fencecron", cfg.Node.Ports.HTTP)
			if got := s.DependsOn["postgres"].Condition; got != "service_healthy" {
				t.Errorf("depends_on postgres: %q; want service_healthy", got)
			}
			if s.StopGrace == "" {
				t.Error("no stop_grace_period: compose's 10 s default is short for a hand-over and a clean stop")
			}
			// Its own volume at data_dir, and the shared config.
			var data, config bool
			for _, v := range s.Volumes {
				parts := strings.Split(v, ":")
				if len(parts) < 2 {
					t.Errorf("volume %q", v)
					continue
				}
				switch parts[1] {
				case cfg.Node.DataDir:
					_, declared := c.Volumes[parts[0]]
					data = declared && parts[0] == name+"-data"
				case "/etc/fencecron/fencecron.yaml":
					config = parts[0] == "./fencecron.yaml"
				}
			}
			if !data || !config {
				t.Errorf("volumes %v: want its own named volume %s-data at %s and ./fencecron.yaml at /etc/fencecron/fencecron.yaml", s.Volumes, name, cfg.Node.DataDir)
			}
			// Published on loopback, to the config's HTTP port.
			if len(s.Ports) != 1 || !strings.HasPrefix(s.Ports[0], "127.0.0.1:") || !strings.HasSuffix(s.Ports[0], fmt.Sprintf(":%d", cfg.Node.Ports.HTTP)) {
				t.Errorf("ports %v; want 127.0.0.1:HOSTPORT:%d", s.Ports, cfg.Node.Ports.HTTP)
			} else if hostPorts[strings.Split(s.Ports[0], ":")[1]] {
				t.Errorf("host port of %v taken twice", s.Ports)
			} else {
				hostPorts[strings.Split(s.Ports[0], ":")[1]] = true
			}
			// The environment the config expands, and an address that is its own.
			for _, m := range vars {
				if _, ok := s.Environment[m[1]]; !ok {
					t.Errorf("the config expands ${%s}, which the service's environment lacks", m[1])
				}
			}
			if got := s.Environment["NODE_NAME"]; got != name {
				t.Errorf("NODE_NAME %q; want the service's name", got)
			}
			ip := ""
			for _, n := range s.Networks {
				ip = n.IPv4
			}
			if ip == "" || ip != s.Environment["NODE_IP"] {
				t.Errorf("NODE_IP %q; want the service's fixed address %q", s.Environment["NODE_IP"], ip)
			}
			if !strings.Contains(s.Environment["FENCECRON_POSTGRES_URL"], "@postgres:5432/") {
				t.Errorf("FENCECRON_POSTGRES_URL %q does not name the postgres service", s.Environment["FENCECRON_POSTGRES_URL"])
			}
		})
	}

	// The config validates as each node sees it.
	bin := deploytest.Build(t, t.TempDir())
	for _, name := range nodes {
		s := c.Services[name]
		env := append([]string{
			"NODE_NAME=" + name, "NODE_IP=" + s.Environment["NODE_IP"],
			"FENCECRON_POSTGRES_URL=postgres://fencecron:pw@postgres:5432/fencecron?sslmode=disable",
		}, deploytest.Secrets...)
		deploytest.Validate(t, bin, "fencecron.yaml", env...)
	}
}

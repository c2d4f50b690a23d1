// Package kubernetes_test checks deploy/kubernetes without a cluster: the
// manifests parse, their pieces name each other consistently (ports,
// labels and selectors, the headless Service, volumes, probes, the
// environment the config expands), and the node config in the ConfigMap
// passes `fencecron validate`.
package kubernetes_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/deploy/internal/deploytest"
)

// The parts of the Kubernetes objects the checks read.
type (
	object struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   meta   `yaml:"metadata"`
		Spec       yaml.Node
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
		Resources  []string          `yaml:"resources"`
	}
	meta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	statefulSet struct {
		ServiceName         string   `yaml:"serviceName"`
		Replicas            int      `yaml:"replicas"`
		PodManagementPolicy string   `yaml:"podManagementPolicy"`
		Selector            selector `yaml:"selector"`
		Template            struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata meta `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	}
	podSpec struct {
		SecurityContext struct {
			RunAsNonRoot bool `yaml:"runAsNonRoot"`
			RunAsUser    int  `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
		Containers                    []container `yaml:"containers"`
		Volumes                       []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	}
	container struct {
		Args []string `yaml:"args"`
		Env  []struct {
			Name      string `yaml:"name"`
			ValueFrom *struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		EnvFrom []struct {
			SecretRef *struct {
				Name string `yaml:"name"`
			} `yaml:"secretRef"`
		} `yaml:"envFrom"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
			Protocol      string `yaml:"protocol"`
		} `yaml:"ports"`
		ReadinessProbe probe `yaml:"readinessProbe"`
		LivenessProbe  probe `yaml:"livenessProbe"`
		VolumeMounts   []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
	service struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
			Protocol   string `yaml:"protocol"`
		} `yaml:"ports"`
	}
	pdb struct {
		MaxUnavailable int      `yaml:"maxUnavailable"`
		Selector       selector `yaml:"selector"`
	}
	// nodeConfig is the part of the ConfigMap's fencecron.yaml the
	// manifests must agree with (the rest is fencecron validate's).
	nodeConfig struct {
		Node struct {
			Name    string `yaml:"name"`
			DataDir string `yaml:"data_dir"`
			Ports   struct {
				HTTP   int `yaml:"http"`
				Gossip int `yaml:"gossip"`
				Raft   int `yaml:"raft"`
			} `yaml:"ports"`
			Join            []string `yaml:"join"`
			BootstrapExpect int      `yaml:"bootstrap_expect"`
		} `yaml:"node"`
	}
)

// manifests reads every object of the files kustomization.yaml lists and
// checks that it lists every YAML file here.
func manifests(t *testing.T) []object {
	t.Helper()
	var k object
	mustDecode(t, "kustomization.yaml", &k)
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(k.Resources, f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}
	var objs []object
	for _, f := range k.Resources {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("kustomization.yaml lists %s: %v", f, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(false)
		for {
			var o object
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" || o.APIVersion == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: an object without kind, apiVersion or name", f)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

func mustDecode(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// one returns the only object of a kind, or the one with that name.
func one(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	var found []object
	for _, o := range objs {
		if o.Kind == kind && (name == "" || o.Metadata.Name == name) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s %q, found %d", kind, name, len(found))
	}
	return found[0]
}

func spec[T any](t *testing.T, o object) T {
	t.Helper()
	var v T
	if err := o.Spec.Decode(&v); err != nil {
		t.Fatalf("%s %s: spec: %v", o.Kind, o.Metadata.Name, err)
	}
	return v
}

// selects reports whether a selector's labels all appear in labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestManifests_Consistent(t *testing.T) {
	objs := manifests(t)
	ss := spec[statefulSet](t, one(t, objs, "StatefulSet", ""))
	podLabels := ss.Template.Metadata.Labels
	if len(ss.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(ss.Template.Spec.Containers))
	}
	c := ss.Template.Spec.Containers[0]

	// The StatefulSet itself.
	if got, want := ss.Replicas, 3; got != want {
		t.Errorf("replicas = %d; want %d", got, want)
	}
	if got, want := ss.PodManagementPolicy, "Parallel"; got != want {
		t.Errorf("podManagementPolicy = %q; want %q: pods become ready only together", got, want)
	}
	if !selects(ss.Selector.MatchLabels, podLabels) {
		t.Errorf("selector %v does not select the pod template's labels %v", ss.Selector.MatchLabels, podLabels)
	}
	// A clean stop: a hand-over plus the agent's 5 s shutdown budget.
	if got := ss.Template.Spec.TerminationGracePeriodSeconds; got < 15 {
		t.Errorf("terminationGracePeriodSeconds = %d; want at least 15 for a hand-over and a clean stop", got)
	}

	// The headless Service the pods' DNS names and the join list use.
	headless := one(t, objs, "Service", ss.ServiceName)
	hs := spec[service](t, headless)
	if hs.ClusterIP != "None" {
		t.Errorf("serviceName %s is not headless (clusterIP %q)", ss.ServiceName, hs.ClusterIP)
	}
	if !hs.PublishNotReadyAddresses {
		t.Errorf("service %s must publish not-ready pods: a pod is ready only once the others found it", ss.ServiceName)
	}
	// The config: ports, data directory, join list, bootstrap.
	cm := one(t, objs, "ConfigMap", "")
	configPath := ""
	if i := slices.Index(c.Args, "-config"); i >= 0 && i+1 < len(c.Args) && c.Args[0] == "agent" {
		configPath = c.Args[i+1]
	} else {
		t.Fatalf("container args %v: want agent -config FILE", c.Args)
	}
	text, ok := cm.Data[filepath.Base(configPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", cm.Metadata.Name, filepath.Base(configPath))
	}
	var cfg nodeConfig
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("ConfigMap's %s: %v", filepath.Base(configPath), err)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	configVolume := ""
	for _, v := range ss.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
			configVolume = v.Name
		}
	}
	if got, want := mounts[configVolume], filepath.Dir(configPath); configVolume == "" || got != want {
		t.Errorf("ConfigMap %s mounted at %q (volume %q); want %q, where -config reads", cm.Metadata.Name, got, configVolume, want)
	}
	if len(ss.VolumeClaimTemplates) != 1 {
		t.Fatalf("want one volumeClaimTemplate, have %d", len(ss.VolumeClaimTemplates))
	}
	if got, want := mounts[ss.VolumeClaimTemplates[0].Metadata.Name], cfg.Node.DataDir; got != want {
		t.Errorf("the claimed volume is mounted at %q; node.data_dir is %q", got, want)
	}
	if got, want := cfg.Node.BootstrapExpect, ss.Replicas; got != want {
		t.Errorf("bootstrap_expect = %d; want replicas, %d", got, want)
	}
	var wantJoin []string
	for i := range ss.Replicas {
		wantJoin = append(wantJoin, fmt.Sprintf("%s-%d.%s:%d", one(t, objs, "StatefulSet", "").Metadata.Name, i, ss.ServiceName, cfg.Node.Ports.Gossip))
	}
	if !slices.Equal(cfg.Node.Join, wantJoin) {
		t.Errorf("node.join = %v; want each pod's DNS name under the headless Service: %v", cfg.Node.Join, wantJoin)
	}

	// Container ports are the config's.
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name+"/"+p.Protocol] = p.ContainerPort
	}
	for name, want := range map[string]int{
		"http/TCP": cfg.Node.Ports.HTTP, "gossip-tcp/TCP": cfg.Node.Ports.Gossip,
		"gossip-udp/UDP": cfg.Node.Ports.Gossip, "raft/TCP": cfg.Node.Ports.Raft,
	} {
		if got := ports[name]; got != want {
			t.Errorf("container port %s = %d; the config says %d", name, got, want)
		}
	}
	// Services point at named container ports, on the same numbers, and
	// select the pods.
	for _, o := range objs {
		if o.Kind != "Service" {
			continue
		}
		s := spec[service](t, o)
		if !selects(s.Selector, podLabels) {
			t.Errorf("service %s selects %v; the pods are %v", o.Metadata.Name, s.Selector, podLabels)
		}
		for _, p := range s.Ports {
			got, ok := ports[p.TargetPort+"/"+p.Protocol]
			if !ok {
				t.Errorf("service %s port %s targets %s/%s, which the container does not name", o.Metadata.Name, p.Name, p.TargetPort, p.Protocol)
			} else if got != p.Port {
				t.Errorf("service %s port %s = %d; the container's %s is %d", o.Metadata.Name, p.Name, p.Port, p.TargetPort, got)
			}
		}
	}
	for _, want := range []string{"gossip-tcp/TCP", "gossip-udp/UDP", "raft/TCP"} {
		found := false
		for _, p := range hs.Ports {
			found = found || p.TargetPort+"/"+p.Protocol == want
		}
		if !found {
			t.Errorf("headless service %s lacks %s", ss.ServiceName, want)
		}
	}
	dashboard := 0
	for _, o := range objs {
		if o.Kind == "Service" && o.Metadata.Name != ss.ServiceName {
			for _, p := range spec[service](t, o).Ports {
				if p.TargetPort == "http" {
					dashboard++
				}
			}
		}
	}
	if dashboard == 0 {
		t.Error("no Service besides the headless one serves the dashboard (targetPort http)")
	}

	// Probes: ready at /readyz, alive at /healthz, on the HTTP port.
	for _, p := range []struct {
		name, path string
		probe      probe
	}{{"readinessProbe", "/readyz", c.ReadinessProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}} {
		if p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || ports[p.probe.HTTPGet.Port+"/TCP"] != cfg.Node.Ports.HTTP {
			t.Errorf("%s = %+v; want GET %s on the http port (%d)", p.name, p.probe.HTTPGet, p.path, cfg.Node.Ports.HTTP)
		}
	}

	// The budget: one pod down at a time, the same pods.
	b := spec[pdb](t, one(t, objs, "PodDisruptionBudget", ""))
	if b.MaxUnavailable != 1 || !selects(b.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget maxUnavailable %d selector %v; want 1 and the pods' labels %v", b.MaxUnavailable, b.Selector.MatchLabels, podLabels)
	}

	// Every ${VAR} of the config comes from the pod or the Secret.
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil {
			for k := range one(t, objs, "Secret", ef.SecretRef.Name).StringData {
				env[k] = true
			}
		}
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(text, -1) {
		if !env[m[1]] {
			t.Errorf("the config expands ${%s}, which the container's environment does not set", m[1])
		}
	}
}

// TestManifests_ImageUser: the pods run as the user the image declares
// (deploy/container/Containerfile), never as root.
func TestManifests_ImageUser(t *testing.T) {
	ss := spec[statefulSet](t, one(t, manifests(t), "StatefulSet", ""))
	data, err := os.ReadFile(filepath.Join("..", "container", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "USER "); ok {
			user, _, _ = strings.Cut(strings.TrimSpace(rest), ":")
		}
	}
	sc := ss.Template.Spec.SecurityContext
	if !sc.RunAsNonRoot || sc.RunAsUser == 0 || fmt.Sprint(sc.RunAsUser) != user {
		t.Errorf("pod securityContext runAsNonRoot %v runAsUser %d; want true and the image's USER %q", sc.RunAsNonRoot, sc.RunAsUser, user)
	}
}

// TestManifests_ConfigValidates runs `fencecron validate` on the ConfigMap's
// config, as the first pod sees it.
func TestManifests_ConfigValidates(t *testing.T) {
	objs := manifests(t)
	cm := one(t, objs, "ConfigMap", "")
	dir := t.TempDir()
	path := filepath.Join(dir, "fencecron.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["fencecron.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := deploytest.Build(t, dir)
	secret := one(t, objs, "Secret", "")
	env := append([]string{
		"POD_NAME=fencecron-0", "POD_IP=10.244.1.7",
		"FENCECRON_POSTGRES_URL=" + secret.StringData["FENCECRON_POSTGRES_URL"],
	}, deploytest.Secrets...)
	for _, kv := range deploytest.Secrets {
		if k, _, _ := strings.Cut(kv, "="); secret.StringData[k] == "" {
			t.Errorf("the Secret lacks %s", k)
		}
	}
	deploytest.Validate(t, bin, path, env...)
}

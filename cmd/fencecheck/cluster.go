package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore"
)

// jobsYAML is the workload: four jobs whose runs contend for keys.
//
//   - shared-a fires every second and takes up to 1.9 s, so consecutive
//     runs overlap (overlap: allow): each run establishes its newer token
//     while the previous one still works, and the previous one's publish
//     must be refused.
//   - shared-b writes the same key every other second and never overlaps
//     itself (overlap: forbid, misfire: skip), so two jobs' attempts are
//     fenced against each other and skips are recorded with reasons.
//   - report writes one key per run, runs up to 3.9 s and is replaced by
//     the next run (overlap: replace, misfire: all): takeovers and
//     cancellations race within one run's key.
//   - shared-a of namespace billing has the default shared-a's name and
//     output template, and behaves as it does every other second: it is
//     another job (billing:shared-a, its runs and tokens its own), whose
//     key is ns/billing/shared/a, so a namespace's runs contend among
//     themselves and never with the default namespace's.
//
// Durations come from the attempt's own sequence number, so a run's
// behaviour follows from its token.
func jobsYAML(lease time.Duration) string {
	l := lease.String()
	return fmt.Sprintf(`  - name: shared-a
    schedule: "* * * * * *"
    shell: 'sleep $((FENCECRON_SEQ %% 2)).$((FENCECRON_SEQ %% 10)); echo "$FENCECRON_ATTEMPT $FENCECRON_EPOCH.$FENCECRON_SEQ $FENCECRON_NODE"'
    output: shared/a
    overlap: allow
    lease_ttl: %[1]s
    retries: 2
    backoff: 1s
    timeout: 20s
  - name: shared-b
    schedule: "*/2 * * * * *"
    shell: 'sleep $((FENCECRON_SEQ %% 3)).$((FENCECRON_SEQ %% 7)); echo "$FENCECRON_ATTEMPT $FENCECRON_EPOCH.$FENCECRON_SEQ $FENCECRON_NODE"'
    output: shared/a
    overlap: forbid
    misfire: skip
    lease_ttl: %[1]s
    retries: 1
    backoff: 1s
    timeout: 20s
  - name: report
    schedule: "*/3 * * * * *"
    shell: 'sleep $((1 + FENCECRON_SEQ %% 3)).$((FENCECRON_SEQ %% 9)); echo "report $FENCECRON_SCHEDULED_AT by $FENCECRON_ATTEMPT $FENCECRON_EPOCH.$FENCECRON_SEQ"'
    output: 'reports/{{ .Scheduled.Format "150405" }}.txt'
    overlap: replace
    misfire: all
    lease_ttl: %[1]s
    retries: 3
    backoff: 1s
    timeout: 20s
  - name: shared-a
    namespace: billing
    schedule: "*/2 * * * * *"
    shell: 'sleep $((FENCECRON_SEQ %% 2)).$((FENCECRON_SEQ %% 10)); echo "$FENCECRON_ATTEMPT $FENCECRON_EPOCH.$FENCECRON_SEQ $FENCECRON_NODE"'
    output: shared/a
    overlap: allow
    lease_ttl: %[1]s
    retries: 2
    backoff: 1s
    timeout: 20s
`, l)
}

// faultEnv is the test-only misbehaviour built into some nodes
// (FENCECRON_FAULTS, scheduler/faults/on.go; a test build's only):
//
//   - w1 stops itself right before publishing the output of every first
//     attempt, as a GC pause between computing and writing would; the
//     harness resumes it after longer than the lease (pause before write).
//   - w2 loses the replies of two renewals in a row of every attempt
//     (lost renewals while work continues: SUSPECT, then HELD again).
//   - n3, while it leads, loses the replies of its first dispatches, so
//     it sends the same attempt again (a lost acquisition reply retried
//     with the same id).
func faultEnv(workers int) map[string][]string {
	env := map[string][]string{
		"n3": {"FENCECRON_FAULTS=drop-dispatch-replies=25"},
	}
	if workers >= 1 {
		env["w1"] = []string{"FENCECRON_FAULTS=stop-before-publish=1"}
	}
	if workers >= 2 {
		env["w2"] = []string{"FENCECRON_FAULTS=drop-renew-replies=2"}
	}
	return env
}

// selfPausing is the node that stops itself before publishing.
const selfPausing = "w1"

// historyRetention keeps every decision of a run: the checks replay whole
// histories.
const historyRetention = 10_000_000

var loopbackAddr = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// placeConfig moves a config written for loopback to the given network:
// the node binds its own address, peers are dialled at theirs (found by
// port: every port belongs to one node), the store is reached through
// storeURL, and the store keeps every decision.
func placeConfig(cfg string, self string, ipOf func(node string) string, owner map[int]string, storePort int, storeURL string) string {
	cfg = strings.ReplaceAll(cfg, strconv.Quote(fmt.Sprintf("http://127.0.0.1:%d", storePort)), strconv.Quote(storeURL))
	cfg = loopbackAddr.ReplaceAllStringFunc(cfg, func(s string) string {
		port, _ := strconv.Atoi(s[len("127.0.0.1:"):])
		if node, ok := owner[port]; ok {
			return fmt.Sprintf("%s:%d", ipOf(node), port)
		}
		return s
	})
	cfg = strings.Replace(cfg, "\n  bind: 127.0.0.1\n", "\n  bind: "+ipOf(self)+"\n", 1)
	cfg = strings.Replace(cfg, "\nstore:\n", fmt.Sprintf("\nstore:\n  history_retention: %d\n", historyRetention), 1)
	return cfg
}

// setup lays out the cluster, places every node on the network, starts
// the store proxy (and, in namespaces, a forwarder from 127.0.0.1 to each
// node's HTTP port, so the harness reads every node where localcluster
// expects it), and starts the nodes.
func (h *Harness) setup() error {
	c, err := localcluster.Prepare(localcluster.Options{
		Binary: h.cfg.Binary, Dir: h.cfg.Dir, Servers: h.cfg.Servers, Workers: h.cfg.Workers,
		StoreNode: true, Profile: "fast", Jobs: jobsYAML(h.cfg.Lease), Env: faultEnv(h.cfg.Workers),
	})
	if err != nil {
		return err
	}
	h.c = c
	var names []string
	owner := map[int]string{}
	for _, n := range c.Nodes {
		names = append(names, n.Name)
		for _, p := range []int{n.HTTP, n.Gossip, n.Raft} {
			owner[p] = n.Name
		}
	}
	switch h.cfg.Net {
	case "loopback":
		h.net = loopback{}
	case "netns", "auto":
		n, err := newNetns(h.cfg.Dir, names)
		switch {
		case err == nil:
			h.net = n
		case h.cfg.Net == "netns":
			return fmt.Errorf("network namespaces: %w", err)
		default:
			h.logf("network namespaces unavailable (%v): every node on 127.0.0.1, no partitions", err)
			h.net = loopback{}
		}
	default:
		return fmt.Errorf("unknown -net %q: want auto, netns or loopback", h.cfg.Net)
	}

	storeNode := c.Node("store")
	signer, err := fencedstore.NewSigner([]byte(c.Secret))
	if err != nil {
		return err
	}
	id, err := clustertls.Load(clustertls.Config{NodeName: "fencecheck-store-proxy", Secret: []byte(c.Secret), Hosts: []string{h.net.HostIP()}})
	if err != nil {
		return err
	}
	h.store, err = ListenStoreProxy(h.net.HostIP()+":0", fmt.Sprintf("https://%s:%d", h.net.IP("store"), storeNode.HTTP), signer, id)
	if err != nil {
		return fmt.Errorf("store proxy: %w", err)
	}
	storeURL := "https://" + h.store.Addr()
	for _, n := range c.Nodes {
		cfg := placeConfig(c.Config(n), n.Name, h.net.IP, owner, storeNode.HTTP, storeURL)
		if err := os.WriteFile(n.ConfigPath, []byte(cfg), 0o600); err != nil {
			return err
		}
		bin, err := h.net.Wrap(n.Name, h.cfg.Binary)
		if err != nil {
			return err
		}
		n.SetCommand(bin)
		if _, isLoop := h.net.(loopback); !isLoop {
			f, err := Listen(fmt.Sprintf("127.0.0.1:%d", n.HTTP), fmt.Sprintf("%s:%d", h.net.IP(n.Name), n.HTTP))
			if err != nil {
				return fmt.Errorf("forwarder for %s: %w", n.Name, err)
			}
			h.forwards = append(h.forwards, f)
		}
	}
	h.logf("%d nodes (%s) on %s; store %s through proxy %s; logs in %s", len(c.Nodes), strings.Join(names, " "), h.net.Name(), storeNode.Name, h.store.Addr(), h.cfg.Dir)
	for _, n := range c.Nodes {
		h.lives[n.Name] = 1
	}
	return c.StartAll()
}

// teardown stops everything setup started.
func (h *Harness) teardown() {
	if h.c != nil {
		h.c.Stop()
	}
	for _, f := range h.forwards {
		f.Close()
	}
	if h.store != nil {
		h.store.Close()
	}
	if h.net != nil {
		if err := h.net.Close(); err != nil {
			h.logf("network cleanup: %v", err)
		}
	}
}

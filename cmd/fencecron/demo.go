package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/localcluster"
)

// `fencecron demo` tells the story fencecron exists for, on a real
// cluster of this very binary: a worker holding the report stalls past
// its lease, another takes over with a newer token and publishes, the
// first wakes up and its write is refused by the store. Then the leader
// is killed once, so the dashboard shows a second epoch. Every node is a
// separate process started from os.Executable: the production code paths,
// not a simulation. The story's steps live in demo_story.go, the
// dashboard's front door in demo_proxy.go.

// Demo job timings. The report's command runs long enough that w1 is
// paused while it runs (the pause waits for the run to be started, which
// a worker reports after a second), and finishes during the pause, so
// that w1, when continued, goes straight on to publish.
const (
	demoLease      = 4 * time.Second
	demoReportRuns = 3 * time.Second
	// demoEvery is how often -loop tells the story.
	demoEvery = time.Minute
	// demoStopWait bounds each node's clean exit when the demo stops.
	demoStopWait = 15 * time.Second
	// demoMarker is set in every node's environment (and so in every job
	// process's) to the demo's directory: how the demo finds, when it
	// stops, any process of its cluster that outlived its node.
	demoMarker = "FENCECRON_DEMO"
)

// demoJobs is the cluster's job set. report is triggered by the demo
// (its schedule fires once a year); only the workers match its target.
// backup runs on w2 only: while it runs, w2 has one open attempt and w1
// none, and the leader gives a new run to the least loaded worker.
var demoJobs = fmt.Sprintf(`  - name: report
    schedule: "0 0 1 1 *"
    target: {role: worker}
    shell: 'sleep %d; echo "report written by $FENCECRON_NODE with token $FENCECRON_EPOCH.$FENCECRON_SEQ"'
    output: 'reports/{{ .Scheduled.Format "2006-01-02-150405" }}.csv'
    lease_ttl: %s
    retries: 1
    backoff: 1s
    timeout: 2m
  - name: backup
    schedule: "0 0 1 1 *"
    target: {backup: "yes"}
    shell: 'sleep 8; echo "backup done on $FENCECRON_NODE"'
    lease_ttl: %s
    timeout: 2m
`, int(demoReportRuns/time.Second), demoLease, demoLease)

var demoTags = map[string]map[string]string{
	"w1": {"role": "worker"},
	"w2": {"role": "worker", "backup": "yes"},
}

// demoOptions are the demo's flags.
type demoOptions struct {
	httpAddr string
	dataDir  string
	pause    time.Duration
	loop     bool
	basePort int // 0: free ports from localcluster's range
}

// demoPorts is how many consecutive ports -base-port takes: HTTP, gossip
// and Raft for each of the six nodes, then the store link.
const demoPorts = 6*3 + 1

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parseDemoFlags(args, stderr)
	if err != nil {
		return err
	}
	binary, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to start the nodes: %w", err)
	}

	// The dashboard's address comes first: bind it before anything else,
	// so a taken port fails at once.
	ln, err := net.Listen("tcp", opts.httpAddr)
	if err != nil {
		return fmt.Errorf("-http %s: %w (pass -http 127.0.0.1:0 for any free port)", opts.httpAddr, err)
	}
	defer ln.Close()
	dash := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "fencecron demo: dashboard %s/  (the story's timeline: %s/timeline?job=report); open it in a browser, nothing opens by itself\n", dash, dash)

	dir, keep, err := demoDir(opts.dataDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "starting a cluster of %s on loopback, in %s:\n", binary, dir)
	c, link, err := startDemoCluster(binary, dir, demoEnv(dir), opts.basePort)
	if err != nil {
		removeDemoDir(dir, keep, stdout, stderr)
		return fmt.Errorf("start the cluster: %w", err)
	}
	defer link.close()
	d := &demo{c: c, link: link, out: stdout, pause: opts.pause, dash: dash}
	d.printCluster()

	srv := &http.Server{Handler: d.proxy(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()

	storyErr := d.tell(ctx, opts.loop)

	if storyErr != nil && ctx.Err() == nil {
		fmt.Fprintf(stdout, "the story stopped: %v\n", storyErr)
		keep = true // the node logs say why
	}
	stopErr := d.stop(srv, served)
	removeDemoDir(dir, keep, stdout, stderr)
	if ctx.Err() != nil && storyErr != nil {
		storyErr = nil // Ctrl-C: the way a demo ends
	}
	if err := errors.Join(storyErr, stopErr); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "stopped.")
	return nil
}

// parseDemoFlags refuses, before anything starts, a pause too short for
// the story to happen and a dashboard address off loopback.
func parseDemoFlags(args []string, stderr io.Writer) (demoOptions, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", defaultListenAddr(), "loopback address of the dashboard, through which the other commands reach the cluster too (default $FENCECRON_ADDR, else "+config.DefaultAddr+"; port 0: any free port)")
	dataDir := fs.String("data", "", "keep the cluster's configs, data and logs in this new or empty directory (default: a temporary directory, removed on exit)")
	pause := fs.Duration("pause", 12*time.Second, fmt.Sprintf("how long w1 stays stopped; more than the report's lease (%s)", demoLease))
	loop := fs.Bool("loop", false, "tell the story again every minute until Ctrl-C")
	basePort := fs.Int("base-port", 0, fmt.Sprintf("put the nodes and the store link on the %d ports from this one (default: free ports between 20000 and 31999)", demoPorts))
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: fencecron demo [-http ADDR] [-base-port N] [-data DIR] [-pause 12s] [-loop]\n\n"+
			"Starts a cluster of this binary on loopback (three servers, two workers, a store node) and\n"+
			"shows, with real fence tokens, a paused worker's late write refused by the store.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return demoOptions{}, err
	}
	if fs.NArg() > 0 {
		return demoOptions{}, fmt.Errorf("demo takes no arguments, got %q", fs.Args())
	}
	if *pause <= demoLease {
		return demoOptions{}, fmt.Errorf("-pause %s: must be longer than the report's lease (%s), or w1's lease never expires", *pause, demoLease)
	}
	host, _, err := splitHostPort(*httpAddr)
	if err != nil {
		return demoOptions{}, fmt.Errorf("-http: %w", err)
	}
	if !isLoopbackHost(host) {
		// Behind the demo's proxy every visitor looks local to the nodes,
		// which let local clients trigger and pause jobs.
		return demoOptions{}, fmt.Errorf("-http %s: the demo serves on loopback only (127.0.0.1, ::1 or localhost)", *httpAddr)
	}
	if *basePort != 0 && (*basePort < 1024 || *basePort+demoPorts-1 > 65535) {
		return demoOptions{}, fmt.Errorf("-base-port %d: the demo takes ports %d to %d; choose a base port from 1024 to %d", *basePort, *basePort, *basePort+demoPorts-1, 65535-demoPorts+1)
	}
	return demoOptions{httpAddr: *httpAddr, dataDir: *dataDir, pause: *pause, loop: *loop, basePort: *basePort}, nil
}

// demoEnv marks every node's environment with the demo's directory, so
// that stopAll can find what outlived its node.
func demoEnv(dir string) map[string][]string {
	env := map[string][]string{}
	for _, name := range []string{"n1", "n2", "n3", "w1", "w2", "store"} {
		env[name] = []string{demoMarker + "=" + dir}
	}
	return env
}

// removeDemoDir removes the cluster's directory unless it is kept: asked
// for with -data, or left for the node logs after a failed story.
func removeDemoDir(dir string, keep bool, stdout, stderr io.Writer) {
	if keep {
		fmt.Fprintf(stdout, "configs, data and node logs kept in %s\n", dir)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(stderr, "fencecron demo: remove %s: %v\n", dir, err)
	}
}

// printCluster lists the nodes with their ports, pids and logs, for
// whoever wants to watch or stop one by hand.
func (d *demo) printCluster() {
	for _, n := range d.c.Nodes {
		role := "server (votes in Raft)"
		switch {
		case n.Store:
			role = "store  (serves the fenced store, runs no jobs)"
		case !n.Server:
			role = "worker (runs jobs, never votes)"
		}
		fmt.Fprintf(d.out, "  %-5s %s  http 127.0.0.1:%d  gossip %d  raft %d  pid %d  log %s\n",
			n.Name, role, n.HTTP, n.Gossip, n.Raft, n.Pid(), n.LogPath)
	}
	fmt.Fprintf(d.out, "  w1 reaches the store through the demo's link %s, which can hold its writes in flight\n", d.link.URL())
}

// stop ends the demo: the dashboard first, then every node, then
// whatever of theirs outlived them.
func (d *demo) stop(srv *http.Server, served <-chan struct{}) error {
	fmt.Fprintln(d.out, "stopping every process of the demo…")
	// Close, not Shutdown: a dashboard open in a browser holds an event
	// stream that never goes idle.
	srv.Close()
	<-served
	d.link.close()
	err := d.stopAll()
	localcluster.UnreservePorts()
	return err
}

// startDemoCluster lays out the cluster, points w1 at the store through a
// storeLink, and starts every node.
func startDemoCluster(binary, dir string, env map[string][]string, basePort int) (*localcluster.Cluster, *storeLink, error) {
	c, err := localcluster.Prepare(localcluster.Options{
		Binary: binary, Dir: dir, Servers: 3, Workers: 2, StoreNode: true, Profile: "default",
		Jobs: demoJobs, Tags: demoTags, Env: env, BasePort: basePort,
	})
	if err != nil {
		if basePort != 0 {
			return nil, nil, fmt.Errorf("-base-port %d: %w", basePort, err)
		}
		return nil, nil, err
	}
	store := c.Node("store")
	linkAddr := "127.0.0.1:0"
	if basePort != 0 {
		linkAddr = fmt.Sprintf("127.0.0.1:%d", basePort+3*len(c.Nodes))
	}
	link, err := listenStoreLink(fmt.Sprintf("https://127.0.0.1:%d", store.HTTP), c.Secret, linkAddr)
	if err != nil {
		if basePort != 0 {
			return nil, nil, fmt.Errorf("store link: %w: choose another -base-port", err)
		}
		return nil, nil, fmt.Errorf("store link: %w", err)
	}
	for _, n := range c.Nodes {
		cfg := c.Config(n)
		if n.Name == "w1" {
			cfg = strings.ReplaceAll(cfg, strconv.Quote(store.URL()), strconv.Quote(link.URL()))
		}
		if err := os.WriteFile(n.ConfigPath, []byte(cfg), 0o600); err != nil {
			link.close()
			return nil, nil, err
		}
	}
	if err := c.StartAll(); err != nil {
		link.close()
		return nil, nil, err
	}
	return c, link, nil
}

// demoDir returns the directory the cluster lives in and whether it is
// kept on exit (-data).
func demoDir(data string) (string, bool, error) {
	if data == "" {
		dir, err := os.MkdirTemp("", "fencecron-demo-")
		return dir, false, err
	}
	abs, err := filepath.Abs(data)
	if err != nil {
		return "", false, fmt.Errorf("-data: %w", err)
	}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return abs, true, os.MkdirAll(abs, 0o700)
	case err != nil:
		return "", false, fmt.Errorf("-data: %w", err)
	case len(entries) > 0:
		return "", false, fmt.Errorf("-data %s: not empty; give a new or empty directory (each demo lays out a fresh cluster with its own ports and secret)", abs)
	}
	return abs, true, nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// stopAll stops every node (continued if paused, SIGTERM, then SIGKILL
// of its process group after demoStopWait), all at once, and waits for
// them; then it kills any process that still carries the demo's marker
// (a job a killed node left behind).
func (d *demo) stopAll() error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, n := range d.c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Shutdown(demoStopWait); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if left := localcluster.KillMarked(demoMarker + "=" + d.c.Opts.Dir); len(left) > 0 {
		fmt.Fprintf(d.out, "killed %d leftover process(es) of the cluster: %v\n", len(left), left)
	}
	return errors.Join(errs...)
}

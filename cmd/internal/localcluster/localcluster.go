// Package localcluster runs a cluster of real fencecron processes on
// loopback: its own data directories and ports, a config file per node,
// and the signals faults are made of (SIGSTOP, SIGCONT, SIGKILL, restart
// on the same data directory, wipe). Tests, cmd/fencebench and
// cmd/fencecheck use it.
package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// Options describe a cluster.
type Options struct {
	// Binary is the fencecron executable.
	Binary string
	// Dir holds the configs, data directories and logs.
	Dir string
	// Servers vote in Raft and run jobs; Workers only run jobs.
	Servers, Workers int
	// StoreNode adds a node that serves the bolt store and runs no jobs,
	// so killing servers never takes the store down. Without it, nodes
	// use PostgresURL if set, else the first server serves the store.
	StoreNode   bool
	PostgresURL string
	// Profile is "default" (the default) or "fast". Under "fast" a leader
	// steps down after 100 ms without a quorum's answer, which a loaded
	// machine's scheduling delays alone can cause; tests that are not
	// about election speed use the default.
	Profile string
	// Jobs is the YAML of the jobs section (a list), given to every node.
	Jobs string
	// Sections is YAML of further top-level sections (such as notify:),
	// given to every node.
	Sections string
	// Groups is the YAML of the groups section (a list), given to every
	// node with Jobs.
	Groups string
	// Env adds environment variables to one node's process (by name).
	Env map[string][]string
	// Tags are per node.
	Tags map[string]map[string]string
	// BasePort, if not 0, puts the nodes on consecutive ports from it
	// (each node's HTTP, gossip and Raft, in the order of Nodes) instead
	// of free ports drawn from FreePorts' range: a user on a shared
	// machine picks a range of their own. Prepare fails if one is taken.
	BasePort int
	// JoinHost is the host each node's join list names its peers by
	// (with their gossip ports); default 127.0.0.1. "localhost" tests
	// joining by name.
	JoinHost string
}

// Node is one fencecron process of the cluster.
type Node struct {
	Name                string
	Server, Store       bool
	HTTP, Gossip, Raft  int
	ConfigPath, DataDir string
	LogPath             string
	binary              string
	env                 []string
	secret              string
	mu                  sync.Mutex
	cmd                 *exec.Cmd
	exited              chan struct{}
	waitErr             error
	starts              int
}

// Cluster is a running local cluster.
type Cluster struct {
	Opts  Options
	Nodes []*Node
	// Secret is this cluster's own: tests run clusters side by side, and a
	// port one frees (a killed node) may be taken by a node of another;
	// with a shared secret their gossip would merge the two clusters.
	Secret string
}

// Start lays the cluster out (Prepare), writes each node's config and
// starts every node.
func Start(o Options) (*Cluster, error) {
	c, err := Prepare(o)
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if err := os.WriteFile(n.ConfigPath, []byte(c.config(n)), 0o600); err != nil {
			return nil, err
		}
	}
	if err := c.StartAll(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) storeURL() string {
	for _, n := range c.Nodes {
		if n.Store {
			return n.URL()
		}
	}
	return c.Nodes[0].URL()
}

// config renders one node's config file.
func (c *Cluster) config(n *Node) string {
	var join []string
	for _, m := range c.Nodes {
		if m != n {
			host := c.Opts.JoinHost
			if host == "" {
				host = "127.0.0.1"
			}
			join = append(join, fmt.Sprintf("%q", net.JoinHostPort(host, strconv.Itoa(m.Gossip))))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  name: %s\n  data_dir: %q\n  server: %v\n  run_jobs: %v\n  bind: 127.0.0.1\n", n.Name, n.DataDir, n.Server, !n.Store)
	fmt.Fprintf(&b, "  ports: {http: %d, gossip: %d, raft: %d}\n  join: [%s]\n", n.HTTP, n.Gossip, n.Raft, strings.Join(join, ", "))
	if n.Server {
		fmt.Fprintf(&b, "  bootstrap_expect: %d\n", c.Opts.Servers)
	}
	if tags := c.Opts.Tags[n.Name]; len(tags) > 0 {
		b.WriteString("  tags:\n")
		for _, k := range sortedKeys(tags) {
			fmt.Fprintf(&b, "    %s: %q\n", k, tags[k])
		}
	}
	fmt.Fprintf(&b, "cluster:\n  secret: %q\n  profile: %s\n", c.Secret, c.Opts.Profile)
	switch {
	case c.Opts.StoreNode && n.Store:
		b.WriteString("store:\n  backend: bolt\n  serve: true\n")
	case c.Opts.StoreNode:
		fmt.Fprintf(&b, "store:\n  backend: remote\n  url: %q\n", c.storeURL())
	case c.Opts.PostgresURL != "":
		fmt.Fprintf(&b, "store:\n  backend: postgres\n  url: %q\n  serve: true\n", c.Opts.PostgresURL)
	case n == c.Nodes[0]:
		b.WriteString("store:\n  backend: bolt\n  serve: true\n")
	default:
		fmt.Fprintf(&b, "store:\n  backend: remote\n  url: %q\n", c.storeURL())
	}
	if c.Opts.Sections != "" {
		b.WriteString(strings.TrimSuffix(c.Opts.Sections, "\n") + "\n")
	}
	if c.Opts.Groups != "" {
		b.WriteString("groups:\n")
		b.WriteString(strings.TrimSuffix(c.Opts.Groups, "\n") + "\n")
	}
	if c.Opts.Jobs != "" {
		b.WriteString("jobs:\n")
		b.WriteString(c.Opts.Jobs)
		if !strings.HasSuffix(c.Opts.Jobs, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Node returns a node by name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Servers returns the server nodes.
func (c *Cluster) Servers() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Server {
			out = append(out, n)
		}
	}
	return out
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// URL is the node's HTTP base URL.
func (n *Node) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", n.HTTP) }

// Start starts the node's process (again, after a kill: same config, same
// data directory). Its output is appended to LogPath.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && !exitedLocked(n) {
		return fmt.Errorf("%s is running", n.Name)
	}
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.starts++
	fmt.Fprintf(f, "\n===== start %d of %s at %s =====\n", n.starts, n.Name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(n.binary, "agent", "-config", n.ConfigPath)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), n.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	exited := make(chan struct{})
	n.cmd, n.exited = cmd, exited
	go func() {
		err := cmd.Wait()
		f.Close()
		n.mu.Lock()
		n.waitErr = err
		n.mu.Unlock()
		close(exited)
	}()
	return nil
}

func exitedLocked(n *Node) bool {
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// Running reports whether the process is alive (possibly stopped).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && !exitedLocked(n)
}

// Pid returns the process id of the running node, or 0.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || exitedLocked(n) {
		return 0
	}
	return n.cmd.Process.Pid
}

// Signal sends sig to the node's process.
func (n *Node) Signal(sig syscall.Signal) error {
	pid := n.Pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", n.Name)
	}
	return syscall.Kill(pid, sig)
}

// Pause stops the node's process (SIGSTOP); Resume continues it.
func (n *Node) Pause() error {
	if err := n.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	// The signal is delivered asynchronously: until every thread has
	// stopped, the node can still answer, and a caller that goes on at
	// once may read a leader that is about to freeze.
	return UntilEvery(5*time.Second, time.Millisecond, func() error {
		if !n.Stopped() {
			return fmt.Errorf("%s is not stopped yet", n.Name)
		}
		return nil
	})
}

// allThreadsStopped reports whether every thread of pid is stopped.
func allThreadsStopped(pid int) bool {
	if pid <= 0 {
		return false
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		st, ok := statState(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if !ok || (st != 'T' && st != 't') {
			return false
		}
	}
	return true
}
func (n *Node) Resume() error { return n.Signal(syscall.SIGCONT) }

// Kill SIGKILLs the node's process group (jobs included) and waits for it.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Interrupt sends SIGINT and waits up to d for a clean exit.
func (n *Node) Interrupt(d time.Duration) error { return n.stopWith(syscall.SIGINT, d) }

// Terminate sends SIGTERM, a planned stop (systemd, Kubernetes, docker
// stop), and waits up to d for a clean exit.
func (n *Node) Terminate(d time.Duration) error { return n.stopWith(syscall.SIGTERM, d) }

// WaitExit waits up to d for the process to exit and returns how it did.
func (n *Node) WaitExit(d time.Duration) error {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return errors.New("not started")
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-exited:
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.waitErr
	case <-t.C:
		return fmt.Errorf("%s did not exit within %s", n.Name, d)
	}
}

func (n *Node) stopWith(sig syscall.Signal, d time.Duration) error {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		return errors.New("not started")
	}
	cmd.Process.Signal(sig)
	if err := n.WaitExit(d); err != nil {
		return fmt.Errorf("after %v: %w", sig, err)
	}
	return nil
}

// Stopped reports whether the process is in the stopped (T) state: every
// one of its threads, for until the last one stops it can still answer.
func (n *Node) Stopped() bool { return allThreadsStopped(n.Pid()) }

// ProcState returns the state letter of a process from /proc (R, S, T,
// Z, ...), or false if there is no such process.
func ProcState(pid int) (byte, bool) {
	if pid <= 0 {
		return 0, false
	}
	return statState(fmt.Sprintf("/proc/%d/stat", pid))
}

// statState reads the state letter of a /proc stat file.
func statState(path string) (byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// pid (comm) state ...: comm may hold spaces; the state follows ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || len(s) <= i+2 {
		return 0, false
	}
	return s[i+2], true
}

// Wipe deletes the node's data directory; the node must be stopped.
func (n *Node) Wipe() error {
	if n.Running() {
		return fmt.Errorf("%s is running", n.Name)
	}
	return os.RemoveAll(n.DataDir)
}

// LogTail returns the last max bytes of the node's log. Raft logs every
// failed heartbeat to a dead peer, ten a second; those lines are dropped so
// that the tail reaches back to what happened.
func (n *Node) LogTail(max int) string { return LogTail(n.LogPath, max) }

// LogTail returns the last max bytes of the node log at path, as
// Node.LogTail does.
func LogTail(path string, max int) string {
	b, _ := os.ReadFile(path)
	var kept []byte
	for line := range bytes.Lines(b) {
		if !bytes.Contains(line, []byte("failed to heartbeat to")) && !bytes.Contains(line, []byte("failed to appendEntries to")) {
			kept = append(kept, line...)
		}
	}
	if len(kept) > max {
		kept = kept[len(kept)-max:]
	}
	return string(kept)
}

var httpClient = &http.Client{Timeout: 3 * time.Second}

// GetJSON fetches path from the node and decodes its JSON answer.
func (n *Node) GetJSON(path string, v any) error {
	return n.GetJSONWithin(path, httpClient.Timeout, v)
}

// GetJSONWithin is GetJSON with its own time limit: shorter, so that a
// stopped node does not hold a caller up, or longer, for a node busy
// enough to take seconds over a big answer.
func (n *Node) GetJSONWithin(path string, timeout time.Duration, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	b, err := wire.ReadAnswer(resp)
	if err != nil {
		return fmt.Errorf("GET %s%s: %w", n.Name, path, err)
	}
	return json.Unmarshal(b, v)
}

// Post sends a POST with a JSON body (nil for none) and decodes the answer
// into v (nil to ignore it).
func (n *Node) Post(path string, body, v any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	url, c := n.URL()+path, httpClient
	if strings.HasPrefix(path, "/internal/") {
		// The internal API takes only nodes: come as one, over TLS with a
		// certificate derived from the cluster's secret.
		id, err := clustertls.Load(clustertls.Config{NodeName: "localcluster", Secret: []byte(n.secret)})
		if err != nil {
			return err
		}
		url = "https://" + strings.TrimPrefix(n.URL(), "http://") + path
		c = &http.Client{Timeout: httpClient.Timeout, Transport: &http.Transport{TLSClientConfig: id.LinkClientConfig(n.Name)}}
		defer c.CloseIdleConnections()
	}
	req, _ := http.NewRequest(http.MethodPost, url, rd)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	b, err := wire.ReadAnswer(resp)
	if err != nil {
		return fmt.Errorf("POST %s%s: %w", n.Name, path, err)
	}
	if v != nil {
		return json.Unmarshal(b, v)
	}
	return nil
}

// Status returns the node's /api/v1/status.
func (n *Node) Status() (wire.Status, error) {
	var st wire.Status
	err := n.GetJSON("/api/v1/status", &st)
	return st, err
}

// Runs returns up to limit runs of job ("" for all), newest first.
func (n *Node) Runs(job string, limit int) ([]jobs.Run, error) {
	var out wire.RunList
	err := n.GetJSON(fmt.Sprintf("/api/v1/runs?job=%s&limit=%d", job, limit), &out)
	return out.Runs, err
}

// Agreement is what every live server said about the leader.
type Agreement struct {
	Leader string
	Epoch  uint64
}

// Agreed returns the leader and epoch when every given node reports the
// same leader and epoch, and that leader is one of them and says it leads.
func Agreed(nodes []*Node) (Agreement, error) {
	var a Agreement
	if len(nodes) == 0 {
		return a, errors.New("no nodes")
	}
	leads := map[string]bool{}
	for i, n := range nodes {
		st, err := n.Status()
		if err != nil {
			return a, err
		}
		if st.Leader == "" || st.Epoch == 0 {
			return a, fmt.Errorf("%s: no leader with a committed epoch yet (leader %q, epoch %d)", n.Name, st.Leader, st.Epoch)
		}
		if st.RaftState == "Leader" {
			leads[st.Node] = true
		}
		if st.EpochOf != st.Leader {
			return a, fmt.Errorf("%s: leader %s has not committed its epoch yet (epoch %d is %s's)", n.Name, st.Leader, st.Epoch, st.EpochOf)
		}
		if i == 0 {
			a = Agreement{Leader: st.Leader, Epoch: st.Epoch}
			continue
		}
		if st.Leader != a.Leader || st.Epoch != a.Epoch {
			return a, fmt.Errorf("disagreement: %s says %s/%d, %s says %s/%d", nodes[0].Name, a.Leader, a.Epoch, n.Name, st.Leader, st.Epoch)
		}
	}
	if !leads[a.Leader] || len(leads) != 1 {
		return a, fmt.Errorf("the agreed leader %s is not among the nodes asked, or does not lead (leading: %v)", a.Leader, leads)
	}
	return a, nil
}

// Live returns the nodes whose processes run and are not stopped.
func (c *Cluster) Live(nodes []*Node) []*Node {
	var out []*Node
	for _, n := range nodes {
		if n.Running() && !n.Stopped() {
			out = append(out, n)
		}
	}
	return out
}

// Until polls cond every 50ms until it returns nil or d passes, and
// returns cond's last error.
func Until(d time.Duration, cond func() error) error { return UntilEvery(d, 50*time.Millisecond, cond) }

// UntilEvery is Until polling every `every`.
func UntilEvery(d, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", d, err)
		}
		time.Sleep(every)
	}
}

// UntilProgressStops polls cond every every until it returns a nil error.
// It gives up when what cond reports as its progress has not changed for
// stall, or after limit in all: a slow machine gets the time it needs as
// long as the cluster moves, and a stuck one fails in stall.
func UntilProgressStops[P comparable](stall, limit, every time.Duration, cond func() (P, error)) error {
	start := time.Now()
	var last P
	moved := start
	for {
		p, err := cond()
		if err == nil {
			return nil
		}
		now := time.Now()
		if p != last {
			last, moved = p, now
		}
		switch {
		case now.Sub(moved) > stall:
			return fmt.Errorf("no progress in %s: %w", stall, err)
		case now.Sub(start) > limit:
			return fmt.Errorf("after %s: %w", limit, err)
		}
		time.Sleep(every)
	}
}

// PauseGroup stops the node's whole process group (SIGSTOP), as a long
// GC pause or a frozen VM would, and waits until every thread of the node
// has stopped. A job the node runs has its own group and goes on.
func (n *Node) PauseGroup() error {
	pid := n.Pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", n.Name)
	}
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %s: %w", n.Name, err)
	}
	return UntilEvery(5*time.Second, time.Millisecond, func() error {
		if !n.Stopped() {
			return fmt.Errorf("%s is not stopped yet", n.Name)
		}
		return nil
	})
}

// ResumeGroup continues the node's process group (SIGCONT).
func (n *Node) ResumeGroup() error {
	pid := n.Pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", n.Name)
	}
	return syscall.Kill(-pid, syscall.SIGCONT)
}

// Shutdown stops the node as an operator would: its group continued (it
// may be paused), SIGTERM (a planned stop: it cancels its attempts, whose
// process groups it terminates), up to d for it to exit, then SIGKILL of
// its group. It returns an error if the node had to be killed.
func (n *Node) Shutdown(d time.Duration) error {
	pid := n.Pid()
	if pid == 0 {
		return nil
	}
	syscall.Kill(-pid, syscall.SIGCONT)
	syscall.Kill(pid, syscall.SIGTERM)
	err := n.WaitExit(d)
	if err == nil || errors.As(err, new(*exec.ExitError)) {
		return nil
	}
	n.Kill()
	return fmt.Errorf("%s: killed: %w", n.Name, err)
}

// UnreservePorts drops this process's port reservations (see reserve), for
// a long-lived process that has stopped its clusters: `fencecron demo`.
// Reservations of exited processes are taken over anyway; this only
// leaves nothing behind.
func UnreservePorts() {
	entries, err := os.ReadDir(portsDir)
	if err != nil {
		return
	}
	me := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		path := filepath.Join(portsDir, e.Name())
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == me {
			os.Remove(path)
		}
	}
}

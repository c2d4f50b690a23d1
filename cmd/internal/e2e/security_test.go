package e2e

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencecron/fencecron/cmd/internal/config"
	"github.com/fencecron/fencecron/cmd/internal/localcluster"
	"github.com/fencecron/fencecron/cmd/internal/proctest"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler/wire"
)

// metric reads one unlabelled gauge from a node's public /metrics, as an
// attacker who can reach the port would.
func metric(t *testing.T, n *localcluster.Node, name string) uint64 {
	t.Helper()
	body, err := httpGet(n.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s %s: %v", n.Name, name, err)
			}
			return uint64(f)
		}
	}
	t.Fatalf("%s: no %s in /metrics", n.Name, name)
	return 0
}

const securityJobs = `
  - name: tick
    schedule: "@every 1h"
    shell: 'echo tick'
    output: 'ticks/{{ .RunID }}.txt'
`

// An outsider with a plain hashicorp/raft TCP transport, who read the term
// and the last log index from a node's public /metrics, sends a follower
// an AppendEntries at term+1 carrying a set_jobs entry, and the leader a
// heartbeat at term+100. Both are refused at the TLS handshake: no term
// moves, the job set stays, the forged job never runs.
func TestSecurity_ForgedRaftMessagesRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, Jobs: securityJobs})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	var follower *localcluster.Node
	for _, n := range c.Servers() {
		if n != leader {
			follower = n
		}
	}
	waitFollowerOf(t, follower, leader.Name)
	// The leader applies the initial job set after its election: wait
	// for it, or "before the attack" would be no job set at all.
	var st wire.Status
	proctest.Eventually(t, 30*time.Second, "the initial job set applied", func() error {
		var err error
		if st, err = follower.Status(); err == nil && st.Jobs.Hash == "" {
			err = fmt.Errorf("%s has no job set yet", follower.Name)
		}
		return err
	})
	jobSet := st.Jobs.Hash
	terms := map[string]uint64{}
	for _, n := range c.Servers() {
		terms[n.Name] = metric(t, n, "fencecron_raft_term")
	}
	term, last := terms[follower.Name], metric(t, follower, "fencecron_raft_last_log_index")

	marker := filepath.Join(t.TempDir(), "pwned")
	forgedJob := jobs.Spec{Name: "pwned", Schedules: []string{"@every 1s"}, Shell: "touch " + marker}
	forgedJob.Normalize()
	cmd, _ := json.Marshal(map[string]any{"op": "set_jobs", "set_jobs": map[string]any{"jobs": []jobs.Spec{forgedJob}, "source": "attacker", "at": time.Now()}})

	attacker, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 3*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(leader.Name), Addr: []byte(fmt.Sprintf("127.0.0.1:%d", leader.Raft))}
	forged := &raft.AppendEntriesRequest{
		RPCHeader: header, Term: term + 1, PrevLogEntry: last, PrevLogTerm: term, LeaderCommitIndex: last + 1,
		Entries: []*raft.Log{{Index: last + 1, Term: term + 1, Type: raft.LogCommand, Data: cmd}},
	}
	var resp raft.AppendEntriesResponse
	if err := attacker.AppendEntries(raft.ServerID(follower.Name), raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", follower.Raft)), forged, &resp); err == nil {
		t.Errorf("follower %s answered a forged AppendEntries: %+v", follower.Name, resp)
	}
	heartbeat := &raft.AppendEntriesRequest{RPCHeader: header, Term: terms[leader.Name] + 100, PrevLogEntry: last, PrevLogTerm: term}
	if err := attacker.AppendEntries(raft.ServerID(leader.Name), raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", leader.Raft)), heartbeat, &resp); err == nil {
		t.Errorf("leader %s answered a heartbeat at term+100: %+v", leader.Name, resp)
	}

	// The cluster goes on: a real run is granted, runs and is reported,
	// all after the attack.
	run := trigger(t, follower, "tick")
	waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
		if r.State != jobs.Succeeded {
			return fmt.Errorf("state %s", r.State)
		}
		return nil
	})
	for _, n := range c.Servers() {
		// The heartbeat's term+100 would show in any node that took it.
		// (The AppendEntries' term+1 cannot be told from an election a
		// busy machine holds on its own; its entry, the forged job set,
		// is what the checks below look for.)
		if got := metric(t, n, "fencecron_raft_term"); got >= terms[leader.Name]+100 {
			t.Errorf("%s: fencecron_raft_term %d, was %d before the attack: it took the forged heartbeat's term", n.Name, got, terms[n.Name])
		}
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.Jobs.Hash != jobSet || st.Leader != leader.Name {
			t.Errorf("%s: job set %s led by %s; before the attack %s led by %s", n.Name, st.Jobs.Hash, st.Leader, jobSet, leader.Name)
		}
		var js struct{ Jobs []jobs.Spec }
		if err := n.GetJSON("/api/v1/jobs", &js); err != nil {
			t.Fatal(err)
		}
		for _, j := range js.Jobs {
			if j.Name != "tick" {
				t.Errorf("%s runs job %q", n.Name, j.Name)
			}
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the forged job ran")
	}
	if log := follower.LogTail(1 << 20); !strings.Contains(log, "refused a connection to the Raft port") {
		t.Errorf("the follower's log does not say it refused the outsider:\n%s", follower.LogTail(3000))
	}
}

// tcpdump returns the tcpdump binary, or skips the test outside CI (in
// CI a missing tcpdump, or not being root, is a failure).
func tcpdump(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tcpdump")
	msg := ""
	switch {
	case err != nil:
		msg = "no tcpdump: install Debian's tcpdump (apt-get install tcpdump) and run go test -run TestSecurity_NothingInCleartext ./cmd/internal/e2e as root"
	case os.Geteuid() != 0:
		msg = "capturing loopback traffic needs root: run go test -run TestSecurity_NothingInCleartext ./cmd/internal/e2e as root"
	default:
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// leakJobs publishes every second, twice: its stdout through its worker,
// and a key of its own with fencecron publish, after which it appends a
// line to $PUBLISHED (a file the test reads; nothing on the wire).
func leakJobs(published string) string {
	return fmt.Sprintf(`
  - name: leakcheck
    schedule: "@every 1s"
    shell: 'echo "leakcheck-body $FENCECRON_SEQ"; echo leakcheck-side | fencecron publish "leakcheck/side-$FENCECRON_SEQ.txt" && echo "$FENCECRON_SEQ" >> "$PUBLISHED"'
    env: {PUBLISHED: %q}
    output: 'leakcheck/{{ .Scheduled.Format "150405" }}.txt'
    overlap: allow
    timeout: 10s
`, published)
}

// Everything nodes and jobs say to each other, captured on loopback while
// jobs run and publish (three servers, a worker, and a store node that the
// others reach over the network): no fence token, credential, log entry,
// job name or report body in the clear.
func TestSecurity_NothingInCleartext(t *testing.T) {
	t.Parallel()
	bin := tcpdump(t)
	publishedFile := filepath.Join(t.TempDir(), "published")
	c := startCluster(t, localcluster.Options{Servers: 3, Workers: 1, StoreNode: true, Jobs: leakJobs(publishedFile)})
	a := agree(t, c, 30*time.Second)
	leader := c.Node(a.Leader)
	waitAlive(t, leader, "w1", "store")
	var ports []string
	for _, n := range c.Nodes {
		for _, p := range []int{n.HTTP, n.Gossip, n.Raft} {
			ports = append(ports, "port "+strconv.Itoa(p))
		}
	}
	pcap := filepath.Join(t.TempDir(), "cluster.pcap")
	dump := exec.Command(bin, "-i", "lo", "-U", "-s", "0", "-w", pcap, strings.Join(ports, " or "))
	stderr, _ := dump.StderrPipe()
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	defer dump.Process.Kill()
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				ready <- nil
				io.Copy(io.Discard, stderr)
				return
			}
		}
		ready <- fmt.Errorf("tcpdump ended before listening")
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tcpdump did not start listening within 10s")
	}
	start := time.Now()

	// One plain request with a marker: proof that the capture sees what
	// is sent in the clear.
	control := "capture-control-" + strconv.FormatInt(start.UnixNano(), 36)
	if _, err := httpGet(leader.URL() + "/healthz?" + control); err != nil {
		t.Fatal(err)
	}
	// The window: jobs fire every second, each publishing twice (its
	// stdout through its worker, and a key of its own with fencecron
	// publish), renewing and reporting; the test sends nothing. It lasts
	// until the jobs have published 6 keys of their own (a minute at
	// most: a busy machine runs fewer jobs a second), which the file they
	// append to tells without a request.
	lines := func() int {
		b, _ := os.ReadFile(publishedFile)
		return bytes.Count(b, []byte("\n"))
	}
	before := lines()
	err := localcluster.UntilEvery(time.Minute, 200*time.Millisecond, func() error {
		if n := lines() - before; n < 6 {
			return fmt.Errorf("the jobs published %d keys of their own since the capture started; want 6", n)
		}
		return nil
	})
	dump.Process.Signal(os.Interrupt)
	dump.Wait()
	end := time.Now()
	if err != nil {
		t.Fatal(err)
	}

	// The window held real work of both kinds.
	published := 0
	for _, prefix := range []string{"leakcheck/side-", "leakcheck/"} {
		var list struct {
			Keys []struct {
				Key     string
				Updated time.Time
			}
		}
		if err := c.Node("store").GetJSON("/api/v1/store?prefix="+prefix, &list); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range list.Keys {
			if k.Updated.After(start) && k.Updated.Before(end) {
				n++
			}
		}
		if n < 3 {
			t.Errorf("only %d keys under %s were published during the capture; want at least 3", n, prefix)
		}
		published += n
	}
	data, err := os.ReadFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(control)) {
		t.Fatalf("the capture (%d bytes) does not hold the plain control request: it saw nothing", len(data))
	}
	forbidden := []string{
		"Fencecron-Token", "Authorization", "Bearer", // headers of store and internal calls
		`"op":`, "set_jobs", `"grant"`, // Raft entries
		"leakcheck", // a job's name: in Raft entries, assignments, keys
		c.Secret,    // the cluster secret
		"FENCECRON_",
	}
	for _, f := range forbidden {
		if i := bytes.Index(data, []byte(f)); i >= 0 {
			lo, hi := max(0, i-80), min(len(data), i+80)
			t.Errorf("%q in cleartext between nodes: …%q…", f, data[lo:hi])
		}
	}
	if m := regexp.MustCompile(`v[0-9]\.[0-9]+\.[0-9]+\.[A-Za-z0-9_-]{4,}`).Find(data); m != nil {
		t.Errorf("a signed fence token in cleartext: %q", m)
	}
	t.Logf("captured %d bytes over %s while %d keys were published", len(data), end.Sub(start).Round(time.Millisecond), published)
}

// agentConfig writes the config of a one-node cluster, name, in dir: its
// node section on free ports, a cluster section with secret (and the
// lines of clusterMore), then rest; it returns the file and the HTTP port.
func agentConfig(t *testing.T, dir, name, secret, clusterMore, rest string) (path string, httpPort int) {
	t.Helper()
	httpPort = proctest.FreePort(t)
	cfg := fmt.Sprintf(`node:
  name: %s
  data_dir: %q
  bind: 127.0.0.1
  ports: {http: %d, gossip: %d, raft: %d}
  bootstrap_expect: 1
cluster:
  secret: %s
  profile: fast
%s%s`, name, filepath.Join(dir, name), httpPort, proctest.FreePort(t), proctest.FreePort(t), secret, clusterMore, rest)
	path = filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, httpPort
}

// waitBody polls url with c until its body holds want.
func waitBody(t *testing.T, c *http.Client, url, want, what string) {
	t.Helper()
	proctest.Eventually(t, 30*time.Second, what, func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			return fmt.Errorf("%s, no %q yet: %.300s", resp.Status, want, b)
		}
		return nil
	})
}

// testCA is an operator's own CA, made in the test.
type testCA struct {
	t    *testing.T
	dir  string
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	// File is the CA's PEM file.
	File string
}

func newTestCA(t *testing.T, dir string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test operations CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{t: t, dir: dir, key: key, cert: cert}
	ca.File = ca.write("ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(name, typ string, b []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return p
}

// issue writes a certificate for name (and 127.0.0.1) and its key; a
// node's certificate serves as a client too.
func (ca *testCA) issue(name string, usages ...x509.ExtKeyUsage) (certFile, keyFile string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	return ca.write(name+".pem", "CERTIFICATE", der), ca.write(name+".key", "PRIVATE KEY", keyDER)
}

// A node with api.tls serves its dashboard and API over HTTPS with the
// operator's certificate: a client trusting that CA gets in, one that does
// not is refused, plain HTTP is sent to HTTPS, the session cookie is
// Secure, and the CLI reaches it with -ca. The node's own jobs still
// publish, over the cluster's TLS on the same port.
func TestAgent_HTTPSDashboardWithOwnCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	caFile := ca.File
	certFile, keyFile := ca.issue("localhost", x509.ExtKeyUsageServerAuth)
	const token = "https-test-api-token-0123456789abcdefgh"
	path, httpPort := agentConfig(t, dir, "web1", "${FENCECRON_SECRET}", "", fmt.Sprintf(`store: {backend: bolt, serve: true}
api:
  token: %s
  tls: {cert_file: %q, key_file: %q}
jobs:
  - name: note
    schedule: "@every 1s"
    shell: 'echo note | fencecron publish "note/$FENCECRON_SEQ.txt"'
`, token, certFile, keyFile))
	proctest.StartEnv(t, "agent", []string{"FENCECRON_SECRET=https-test-cluster-secret-9876543210zyxw"}, "agent", "-config", path)
	base := "https://127.0.0.1:" + strconv.Itoa(httpPort)

	pemCA, _ := os.ReadFile(caFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	trusting := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	waitBody(t, trusting, base+"/", "<html", "the dashboard over HTTPS")
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client that does not trust the operator's CA: %v, want a certificate error", err)
	}
	resp, err := trusting.Get("http://127.0.0.1:" + strconv.Itoa(httpPort) + "/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusPermanentRedirect || loc != base+"/jobs" {
		t.Errorf("plain HTTP: %s to %q, want 308 to %s/jobs", resp.Status, loc, base)
	}
	resp, err = trusting.PostForm(base+"/login", url.Values{"token": {token}, "next": {"/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "fencecron_session" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.Secure || !cookie.HttpOnly {
		t.Errorf("login over HTTPS: %s, session cookie %+v; want a Secure, HttpOnly one", resp.Status, cookie)
	}
	out, err := exec.Command(proctest.Binary(t), "status", "-addr", base, "-ca", caFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "node web1") {
		t.Errorf("fencecron status -addr %s -ca: %v\n%s", base, err, out)
	}
	if out, err := exec.Command(proctest.Binary(t), "status", "-addr", base).CombinedOutput(); err == nil {
		t.Errorf("fencecron status without -ca trusted the operator's certificate:\n%s", out)
	}
	// The node's own job publishes through this port as a node does.
	waitBody(t, trusting, base+"/api/v1/store?prefix=note/", `"key": "note/`, "a job's own publish")
}

// A node with the operator's own PKI for its links (cluster.tls) runs and
// its job publishes over that PKI; a certificate that names another node
// stops it at start with a message that says so.
func TestAgent_OwnClusterPKI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	writeConfig := func(name, cert, key string) string {
		path, _ := agentConfig(t, dir, name, "pki-test-cluster-secret-0123456789abcdefg", fmt.Sprintf("  tls: {ca_file: %q, cert_file: %q, key_file: %q}\n", ca.File, cert, key), `store: {backend: bolt, serve: true}
jobs:
  - name: note
    schedule: "@every 1s"
    shell: 'echo note | fencecron publish "note/$FENCECRON_SEQ.txt"'
`)
		return path
	}

	cert, key := ca.issue("web-frontend", both...)
	out, err := exec.Command(proctest.Binary(t), "agent", "-config", writeConfig("n2", cert, key)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `not node "n2"`) {
		t.Errorf("a node with another's certificate: %v\n%s", err, out)
	}

	cert, key = ca.issue("n1", both...)
	path := writeConfig("n1", cert, key)
	proctest.Start(t, "agent", "agent", "-config", path)
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", f.Node.Ports.HTTP)
	waitBody(t, http.DefaultClient, base+"/api/v1/store?prefix=note/", `"key": "note/`, "a job's own publish over the operator's PKI")
	pemCA, _ := os.ReadFile(filepath.Join(dir, "n1", "cluster-ca.pem"))
	own, _ := os.ReadFile(ca.File)
	if !bytes.Equal(pemCA, own) {
		t.Error("the CA jobs are given is not the operator's")
	}
}

const rollJobs = `
  - name: roll
    schedule: "@every 1h"
    shell: 'echo rolled; echo side | fencecron publish "roll/side-$FENCECRON_SEQ.txt"'
    output: 'roll/{{ .RunID }}.txt'
    overlap: allow
    timeout: 20s
`

// Rolling the cluster secret one node at a time, in the two documented
// steps, with real processes: after every restart the cluster elects,
// grants, runs and publishes (through a job's own token too, signed with
// whichever secret the cluster sends with at that moment); every node logs
// that it switched to the new secret once all had it; and at the end no
// node holds the old one.
func TestSecurity_SecretRollWithoutOutage(t *testing.T) {
	t.Parallel()
	c := startCluster(t, localcluster.Options{Servers: 3, Jobs: rollJobs})
	oldSecret := c.Secret
	newSecret := "rolled-cluster-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-0123456789"
	agree(t, c, 30*time.Second)
	works := func(step string) {
		t.Helper()
		a := agree(t, c, 30*time.Second)
		leader := c.Node(a.Leader)
		var run jobs.Run
		if err := localcluster.Until(20*time.Second, func() error { return leader.Post("/api/v1/jobs/roll/trigger", nil, &run) }); err != nil {
			t.Fatalf("%s: trigger: %v", step, err)
		}
		waitRun(t, leader, run.ID, 30*time.Second, func(r jobs.Run) error {
			a, ok := r.Latest()
			if !ok || r.State != jobs.Succeeded || a.StoreOutcome != "applied" {
				return fmt.Errorf("state %s", r.State)
			}
			return nil
		})
		seq := run.Attempts[0].Token.Seq
		if _, err := getBody(c.Nodes[0], fmt.Sprintf("roll/side-%d.txt", seq)); err != nil {
			t.Fatalf("%s: the job's own publish: %v", step, err)
		}
	}
	works("before the roll")
	restart := func(n *localcluster.Node, secret, previous string) {
		t.Helper()
		if err := n.Interrupt(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		cfg := strings.Replace(c.Config(n), fmt.Sprintf("  secret: %q\n", oldSecret), fmt.Sprintf("  secret: %q\n", secret), 1)
		if previous != "" {
			cfg = strings.Replace(cfg, "cluster:\n", fmt.Sprintf("cluster:\n  previous_secret: %q\n", previous), 1)
		}
		if !strings.Contains(cfg, secret) {
			t.Fatalf("could not set the secret in %s's config:\n%s", n.Name, cfg)
		}
		if err := os.WriteFile(n.ConfigPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	// The first node serves the store: in step 1 it is rolled last, so
	// rolled nodes' tokens meet a store that has only the old secret; in
	// step 2 first, so the others' meet one that has only the new.
	store, others := c.Nodes[0], c.Nodes[1:]
	for _, n := range append(slices.Clone(others), store) {
		restart(n, newSecret, oldSecret)
		works("step 1, " + n.Name + " restarted with the new secret and the old as previous")
	}
	for _, n := range c.Nodes {
		if err := localcluster.Until(20*time.Second, func() error {
			if !strings.Contains(n.LogTail(1<<20), "every member accepts the new cluster secret") {
				return fmt.Errorf("%s has not switched to the new secret", n.Name)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range append([]*localcluster.Node{store}, others...) {
		restart(n, newSecret, "")
		works("step 2, " + n.Name + " restarted with the new secret only")
	}
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), oldSecret) {
			t.Errorf("%s's config still holds the old secret", n.Name)
		}
	}
}

// A real agent with an API token and a small store quota: a job that
// publishes more keys than its scope may hold gets exactly the quota and
// is told the limit; wrong logins lock the address out, the right token
// included, and are logged, counted and audited; logging out ends the
// session on the server.
func TestAgent_QuotaLoginThrottleAndLogout(t *testing.T) {
	t.Parallel()
	const token = "quota-test-api-token-0123456789abcdefgh"
	path, httpPort := agentConfig(t, t.TempDir(), "q1", "quota-test-cluster-secret-9876543210zyxw", "", fmt.Sprintf(`store:
  backend: bolt
  serve: true
  quota: {keys: 3, bytes: 1MiB}
api:
  token: %s
jobs:
  - name: flood
    schedule: "@every 1h"
    shell: 'for i in 1 2 3 4 5; do echo x | fencecron publish "flood/$i.txt" || exit 9; done'
    output: 'flood/{{ .RunID }}.txt'
`, token))
	agent := proctest.Start(t, "agent", "agent", "-config", path)
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	post := func(path string, hdr ...string) (int, http.Header, string) {
		t.Helper()
		path, form, _ := strings.Cut(path, "?")
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	proctest.Eventually(t, 30*time.Second, "the agent serving", func() error {
		_, _, err := proctest.Get(base + "/healthz")
		return err
	})
	var run jobs.Run
	proctest.Eventually(t, 30*time.Second, "a trigger with the API token", func() error {
		code, _, body := post("/api/v1/jobs/flood/trigger", "Authorization", "Bearer "+token)
		if code != 200 {
			return fmt.Errorf("%d %s", code, body)
		}
		return json.Unmarshal([]byte(body), &run)
	})
	proctest.Eventually(t, 30*time.Second, "the flood run to end", func() error {
		var out struct{ Runs []jobs.Run }
		if err := proctest.GetJSON(base+"/api/v1/runs?job=flood", &out); err != nil {
			return err
		}
		for _, r := range out.Runs {
			if r.ID == run.ID && r.State == jobs.Failed {
				run = r
				return nil
			}
		}
		return fmt.Errorf("not failed yet")
	})
	if a := run.Attempts[0]; a.ExitCode == nil || *a.ExitCode != 9 || !strings.Contains(a.StderrTail, "quota") || !strings.Contains(a.StderrTail, "limit is 3") {
		t.Errorf("the flood job's 4th publish: exit %v, stderr %q; want it refused naming the quota", a.ExitCode, a.StderrTail)
	}
	var keys struct{ Keys []fencedstore.Meta }
	if err := proctest.GetJSON(base+"/api/v1/store?prefix=flood/", &keys); err != nil {
		t.Fatal(err)
	}
	if len(keys.Keys) != 3 {
		t.Errorf("flood/ holds %d keys, want the quota's 3: %+v", len(keys.Keys), keys.Keys)
	}

	// A session, used, then ended: its cookie stops working at once.
	form := "Content-Type"
	code, hdr, _ := post("/login?token="+token+"&next=/", form, "application/x-www-form-urlencoded")
	var cookie string
	for _, c := range (&http.Response{Header: hdr}).Cookies() {
		if c.Name == "fencecron_session" {
			cookie = c.Name + "=" + c.Value
		}
	}
	if code != http.StatusSeeOther || cookie == "" {
		t.Fatalf("login: %d, cookie %q", code, cookie)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set("Cookie", cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`data-csrf="([0-9a-f]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the logged-in page")
	}
	if code, _, body := post("/api/v1/jobs/flood/pause", "Cookie", cookie, "X-Fencecron-CSRF", string(m[1])); code != 200 {
		t.Fatalf("pause in the session: %d %s", code, body)
	}
	post("/logout", "Cookie", cookie)
	if code, _, body := post("/api/v1/jobs/flood/resume", "Cookie", cookie, "X-Fencecron-CSRF", string(m[1])); code != http.StatusUnauthorized {
		t.Errorf("resume with the cookie after logout: %d %s, want 401", code, body)
	}

	// Wrong tokens lock this address out; then even the right one waits.
	var last int
	var lastHdr http.Header
	for range 6 {
		last, lastHdr, _ = post("/login?token=wrong-token-0123456789abcdefghijklmn", form, "application/x-www-form-urlencoded")
	}
	if last != http.StatusTooManyRequests || lastHdr.Get("Retry-After") == "" {
		t.Errorf("the 6th wrong login: %d, Retry-After %q; want 429 with Retry-After", last, lastHdr.Get("Retry-After"))
	}
	if code, _, _ := post("/login?token="+token, form, "application/x-www-form-urlencoded"); code != http.StatusTooManyRequests {
		t.Errorf("the right token during the lockout: %d, want 429", code)
	}
	if code, _, _ := post("/api/v1/jobs/flood/resume", "Authorization", "Bearer "+token); code != http.StatusTooManyRequests {
		t.Errorf("the right bearer token during the lockout: %d, want 429", code)
	}
	metrics, err := httpGet(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`fencecron_login_failures_total\{reason="wrong_token"\} [1-9]`).Match(metrics) {
		t.Errorf("no wrong_token count in /metrics")
	}
	proctest.Eventually(t, 10*time.Second, "a login_failed audit event", func() error {
		var out struct{ Events []jobs.Event }
		if err := proctest.GetJSON(base+"/api/v1/events?limit=1000", &out); err != nil {
			return err
		}
		for _, e := range out.Events {
			if e.Kind == jobs.EventLoginFailed && strings.Contains(e.Detail, "127.0.0.1") {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(out.Events))
	})
	if log, _ := os.ReadFile(agent.LogPath); !strings.Contains(string(log), "127.0.0.1") || !strings.Contains(strings.ToLower(string(log)), "login") {
		t.Errorf("the agent's log does not record the failed logins")
	}
}

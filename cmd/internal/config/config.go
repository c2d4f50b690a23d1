// Package config reads fencecron's YAML config file: the node, the
// cluster, the store and the jobs (DESIGN.md, "The config file").
//
// Parsing is strict: unknown fields, wrong types, bad values and
// references to unset environment variables are all errors, and all of
// them are reported together, each with file:line:column. Defaults are
// applied to what the file leaves out.
//
// ${NAME} is replaced by the environment variable NAME in the node,
// cluster and store sections (for secrets such as cluster.secret and a
// PostgreSQL URL). The jobs section is taken literally: job specs are
// replicated to every node and shown by the API, so they must neither
// depend on one node's environment nor carry secrets, and shell scripts
// use ${VAR} themselves.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
)

// Defaults for what the file leaves out.
const (
	DefaultDataDir          = "/var/lib/fencecron"
	DefaultBind             = "127.0.0.1"
	DefaultHTTPPort         = 8080
	DefaultGossipPort       = 7946
	DefaultRaftPort         = 7947
	DefaultProfile          = ProfileDefault
	DefaultBackend          = BackendBolt
	DefaultStorePath        = "store.db"
	DefaultMaxBodyBytes     = fencedstore.DefaultMaxBodyBytes
	DefaultHistoryRetention = 1000
	DefaultQuotaKeys        = fencedstore.DefaultQuotaKeys
	DefaultQuotaBytes       = fencedstore.DefaultQuotaBytes
	DefaultReapAfter        = 72 * time.Hour
)

// Cluster profiles.
const (
	ProfileDefault = "default"
	ProfileFast    = "fast" // shorter Raft and gossip timeouts, for tests and demos
)

// Store backends.
const (
	BackendBolt     = "bolt"
	BackendPostgres = "postgres"
	BackendRemote   = "remote"
)

// Limits on the file.
const (
	MaxFileSize = 4 << 20
	// MinSecretLength is the shortest cluster.secret or api.token
	// accepted (see CheckSecret for the other rules).
	MinSecretLength = 32
)

// Section names.
const (
	SectionNode    = "node"
	SectionCluster = "cluster"
	SectionStore   = "store"
	SectionJobs    = "jobs"
	SectionAPI     = "api"
)

// File is a whole config file, with defaults applied.
type File struct {
	Node    Node
	Cluster Cluster
	Store   Store
	API     API
	// Jobs are validated and normalized, in file order.
	Jobs []jobs.Spec

	// Warnings are things Load found wrong that do not stop the node,
	// such as a literal secret in a file others may read. Parse never
	// sets them (it knows no file mode).
	Warnings []Problem

	// Name is the file name problems are reported against.
	Name     string
	sections map[string]bool
	envUsed  []string
	// literals are the secrets written into the file itself rather than
	// taken from the environment.
	literals []Problem
}

// Node is the node section: this process's identity and addresses.
type Node struct {
	// Name is unique in the cluster; default: the host name.
	Name    string
	DataDir string
	// Server nodes vote in Raft; false makes a worker. Default true.
	Server bool
	// RunJobs false keeps jobs off this node (e.g. the node that serves
	// the store). Default true.
	RunJobs bool
	// Bind is the listen address; Advertise, what peers dial, defaults
	// to it (and is required when Bind is 0.0.0.0 or ::).
	Bind, Advertise string
	Ports           Ports
	// Join lists gossip addresses (host:port) of peers.
	Join []string
	// BootstrapExpect is how many servers to wait for before the first
	// election; 0 means join an existing cluster.
	BootstrapExpect int
	Tags            map[string]string
}

// Ports are a node's listening ports.
type Ports struct {
	HTTP, Gossip, Raft int
}

// Cluster is the cluster section.
type Cluster struct {
	// Secret keys gossip encryption, internal RPC auth and token signing.
	Secret string
	// PreviousSecret, while rolling to a new Secret, is accepted too: set
	// it to the old secret on every node, then remove it everywhere.
	PreviousSecret string
	// TLS is an operator's own PKI for the links between nodes; empty,
	// the PKI is derived from Secret.
	TLS TLSFiles
	// Profile is "default" or "fast".
	Profile string
	// ReapAfter is how long a server may be gone from gossip before the
	// leader removes it from the Raft voters (never below
	// bootstrap_expect). Default 72h.
	ReapAfter time.Duration
}

// Store is the store section.
type Store struct {
	// Backend is "bolt", "postgres" or "remote".
	Backend string
	// Path is the bolt file; relative to the node's data_dir.
	Path string
	// URL is the PostgreSQL DSN (postgres) or http://host:port of the
	// node serving the store (remote).
	URL string
	// Serve exposes this node's store over HTTP.
	Serve bool
	// MaxBodyBytes caps one stored body.
	MaxBodyBytes int64
	// HistoryRetention is how many decisions the store keeps per key,
	// oldest dropped first.
	HistoryRetention int
	// Quota bounds what the keys under one job token's scope may hold,
	// for writes through this node's HTTP store (serve: true).
	Quota Quota
}

// Quota is store.quota: the most keys and body bytes under one job
// token's scope ("reports/").
type Quota struct {
	Keys  int
	Bytes int64
}

// API is the api section: who may change things through this node's
// public HTTP API and dashboard. The internal API between nodes has its
// own credential (cluster.secret) and ignores it.
type API struct {
	// Token, if set, is required by every mutating public endpoint
	// (trigger, pause, resume, PUT /api/v1/jobset, the dashboard's
	// buttons): as "Authorization: Bearer TOKEN", or by logging in to the
	// dashboard with it. Empty: anyone who can reach the port may act.
	Token string
	// ReadOnly refuses every mutating public endpoint on this node with
	// 403, whatever the token, and hides the dashboard's buttons.
	ReadOnly bool
	// AllowedHosts are the names (host, or host:port) plain-HTTP requests
	// may address this node by, besides loopback names, IP addresses and
	// the node's own name: a Host header naming anything else is refused,
	// so a web page cannot rebind its own DNS name to this node's address
	// and talk to it from a browser (DNS rebinding).
	AllowedHosts []string
	// Limits bound the public HTTP server.
	Limits Limits
	// TLS, if set, serves the dashboard and the public API over HTTPS
	// with this certificate (CAFile unused).
	TLS TLSFiles
}

// Limits are the public HTTP server's limits (api.limits). A field left
// at zero takes the web server's default; deploy/examples/fencecron.yaml
// lists them.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers, ReadTimeout
	// the whole request with its body, WriteTimeout writing a response
	// (event streams manage their own), IdleTimeout a keep-alive
	// connection waiting for its next request.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's headers.
	MaxHeaderBytes int64
	// MaxConnections caps the connections served at once; more wait to
	// be accepted. MaxConnectionsPerClient caps those of one client
	// address (not loopback); more are closed. MaxEventStreams caps open
	// /api/v1/events streams; one more gets 503.
	MaxConnections, MaxConnectionsPerClient, MaxEventStreams int
	// EventHeartbeat is how often an idle event stream sends a comment,
	// so proxies keep it and dead clients are noticed.
	EventHeartbeat time.Duration
}

// TLSFiles are the PEM files of a certificate (cluster.tls, api.tls):
// the CAs to trust (cluster.tls only), the certificate with its
// intermediates, and its key.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// Pos is a place in a config file. Line and Column start at 1; 0 means
// unknown.
type Pos struct {
	File         string
	Line, Column int
}

func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return p.File
	case p.Column == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Problem is one thing wrong with a config file.
type Problem struct {
	Pos
	// Path names the field, e.g. "jobs[0].timeout".
	Path string
	Msg  string
}

func (p Problem) String() string {
	if p.Path == "" {
		return fmt.Sprintf("%s: %s", p.Pos, p.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", p.Pos, p.Path, p.Msg)
}

// Error lists every problem found in a config file, in file order. It
// wraps jobs.ErrInvalidConfig.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns jobs.ErrInvalidConfig.
func (e *Error) Unwrap() error { return jobs.ErrInvalidConfig }

// Load reads and parses the config file at path. Problems with the
// content come back as *Error; File.Warnings holds what is wrong but
// allowed, such as a literal secret in a file the group or others may
// read.
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	file, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if readableByOthers(info.Mode()) {
		for _, l := range file.literals {
			l.Msg = fmt.Sprintf("written in a file the group or others may read (mode %04o): chmod 600 %s, or write %s and set it in the environment",
				info.Mode().Perm(), path, l.Msg)
			file.Warnings = append(file.Warnings, l)
		}
	}
	return file, nil
}

// Parse parses a config file's content; name is used in problem
// positions. Every section is optional: a file with only jobs is what
// `fencecron apply` takes. It returns *Error listing every problem, or
// the file with defaults applied.
func Parse(name string, data []byte) (*File, error) {
	return parse(name, data, os.LookupEnv, os.Hostname)
}

func parse(name string, data []byte, lookup func(string) (string, bool), hostname func() (string, error)) (*File, error) {
	d := &decoder{file: name, lookup: lookup, envUsed: map[string]bool{}}
	f := &File{Name: name, sections: map[string]bool{}}
	f.setDefaults(hostname)
	if len(data) > MaxFileSize {
		d.errorf(nil, "", "larger than %d bytes", MaxFileSize)
		return nil, d.result()
	}
	root, ok := d.document(data)
	if !ok {
		return nil, d.result()
	}

	var nodeN, clusterN, storeN, apiN, jobsN *yaml.Node
	seen := d.mapping(root, "", []field{
		{SectionNode, func(v *yaml.Node, p string) { nodeN = v; d.expand = true; d.node(v, p, &f.Node); d.expand = false }},
		{SectionCluster, func(v *yaml.Node, p string) {
			clusterN = v
			d.expand = true
			d.cluster(v, p, &f.Cluster)
			d.expand = false
		}},
		{SectionStore, func(v *yaml.Node, p string) { storeN = v; d.expand = true; d.store(v, p, &f.Store); d.expand = false }},
		{SectionAPI, func(v *yaml.Node, p string) { apiN = v; d.expand = true; d.api(v, p, &f.API); d.expand = false }},
		{SectionJobs, func(v *yaml.Node, p string) { jobsN = v }},
	})
	for k := range seen {
		f.sections[k] = true
	}
	if f.Node.Advertise == "" {
		if ip := net.ParseIP(f.Node.Bind); ip != nil && !ip.IsUnspecified() {
			f.Node.Advertise = f.Node.Bind
		}
	}
	// Check sections that decoded as mappings (or, for cluster, are
	// missing); the others have been reported already.
	if f.sections[SectionNode] && isMapping(nodeN) {
		d.checkNode(nodeN, &f.Node)
	}
	if f.sections[SectionNode] && (!f.sections[SectionCluster] || isMapping(clusterN)) {
		d.checkCluster(clusterN, root, &f.Cluster)
	}
	if f.sections[SectionStore] && isMapping(storeN) {
		d.checkStore(storeN, &f.Store)
	}
	if tn := fieldsOf(apiN)["token"]; tn != nil && f.API.Token != "" && (f.API.Token == f.Cluster.Secret || f.API.Token == f.Cluster.PreviousSecret) && !d.failed["api.token"] {
		d.errorf(tn, "api.token", "the same as cluster.secret (or previous_secret): use another value; the token is typed into browsers and scripts, the secret keys the whole cluster")
	}
	if jobsN != nil {
		f.Jobs = d.jobList(jobsN, f.Store.MaxBodyBytes)
	}
	for k := range d.envUsed {
		f.envUsed = append(f.envUsed, k)
	}
	f.literals = d.literals
	slices.Sort(f.envUsed)
	if err := d.result(); err != nil {
		return nil, err
	}
	return f, nil
}

// yamlLine finds the line number in a yaml.v3 syntax error.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document parses data as exactly one YAML document and returns its
// root node. An empty file is an empty mapping.
func (d *decoder) document(data []byte) (root *yaml.Node, ok bool) {
	defer func() {
		// The YAML library is not supposed to panic; if it does, that is
		// one more problem with the file, not a crash of the node.
		if r := recover(); r != nil {
			d.errorf(nil, "", "cannot parse YAML: %v", r)
			root, ok = nil, false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &yaml.Node{Kind: yaml.MappingNode}, true
		}
		d.syntax(data, err)
		return nil, false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		d.errorf(&extra, "", "a second YAML document; a config file holds one")
		return nil, false
	case !errors.Is(err, io.EOF):
		d.syntax(data, err)
		return nil, false
	}
	if len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode}, true
	}
	root = doc.Content[0]
	if root.Kind != yaml.MappingNode && !isNull(root) {
		d.errorf(root, "", "expected a mapping with sections node, cluster, store, api, jobs; got %s", describe(root))
		return nil, false
	}
	return root, true
}

// syntax reports a YAML syntax error. The YAML library's line numbers
// point at the enclosing collection, sometimes counted from 0, and it
// gives no column; so find the first line at which the file stops parsing
// with the same complaint, and report that line.
func (d *decoder) syntax(data []byte, err error) {
	msg, line := splitYAMLError(err)
	if l := failingLine(data, msg); l > 0 {
		line = l
	}
	d.probs = append(d.probs, Problem{Pos: Pos{File: d.file, Line: line}, Msg: "YAML syntax: " + msg})
}

func splitYAMLError(err error) (msg string, line int) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return msg, line
}

// failingLine returns the smallest k such that the first k lines of data
// fail to parse with message msg, or 0. A binary search: once the real
// error is inside the prefix, every longer prefix fails the same way.
func failingLine(data []byte, msg string) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(k int) bool {
		var n yaml.Node
		err := safeUnmarshal(bytes.Join(lines[:k], nil), &n)
		if err == nil {
			return false
		}
		m, _ := splitYAMLError(err)
		return m == msg
	}
	if !fails(len(lines)) {
		return 0
	}
	lo, hi := 0, len(lines) // fails(hi), !fails(lo) assumed
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// safeUnmarshal decodes every document of data, turning a panic of the
// YAML library into an error.
func safeUnmarshal(data []byte, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		if err := dec.Decode(n); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// result returns the collected problems as *Error, in file order, or nil.
func (d *decoder) result() error {
	if len(d.probs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.probs, func(a, b Problem) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	return &Error{Problems: d.probs}
}

func (f *File) setDefaults(hostname func() (string, error)) {
	name, _ := hostname()
	f.Node = Node{
		Name:    name,
		DataDir: DefaultDataDir,
		Server:  true,
		RunJobs: true,
		Bind:    DefaultBind,
		Ports:   Ports{HTTP: DefaultHTTPPort, Gossip: DefaultGossipPort, Raft: DefaultRaftPort},
	}
	f.Cluster = Cluster{Profile: DefaultProfile, ReapAfter: DefaultReapAfter}
	f.Store = Store{
		Backend:          DefaultBackend,
		Path:             DefaultStorePath,
		MaxBodyBytes:     DefaultMaxBodyBytes,
		HistoryRetention: DefaultHistoryRetention,
		Quota:            Quota{Keys: DefaultQuotaKeys, Bytes: DefaultQuotaBytes},
	}
}

// Has reports whether the file has the named section ("node",
// "cluster", "store", "jobs"). A node needs "node"; a file for
// `fencecron apply` has only "jobs".
func (f *File) Has(section string) bool { return f.sections[section] }

// Specs returns a copy of the jobs: validated, normalized, in file order.
// The error is always nil; Parse has already checked them.
func (f *File) Specs() ([]jobs.Spec, error) {
	return slices.Clone(f.Jobs), nil
}

// JobsHash returns a stable hash of the normalized job set (see
// jobs.HashSpecs): nodes compare it to detect config drift.
func (f *File) JobsHash() string { return jobs.HashSpecs(f.Jobs) }

// EnvUsed returns the names of the environment variables the file
// referenced with ${NAME}, sorted. They hold secrets: a worker should not
// pass them on to the jobs it runs.
func (f *File) EnvUsed() []string { return slices.Clone(f.envUsed) }

// StorePath returns the bolt file's path: Store.Path, relative to the
// node's data_dir unless absolute.
func (f *File) StorePath() string {
	if f.Store.Path == "" || strings.HasPrefix(f.Store.Path, "/") {
		return f.Store.Path
	}
	return strings.TrimSuffix(f.Node.DataDir, "/") + "/" + f.Store.Path
}

// The node section.

func (d *decoder) node(n *yaml.Node, path string, dst *Node) {
	d.mapping(n, path, []field{
		{"name", d.str(&dst.Name)},
		{"data_dir", d.str(&dst.DataDir)},
		{"server", d.boolean(&dst.Server)},
		{"run_jobs", d.boolean(&dst.RunJobs)},
		{"bind", d.str(&dst.Bind)},
		{"advertise", d.str(&dst.Advertise)},
		{"ports", func(v *yaml.Node, p string) {
			d.mapping(v, p, []field{
				{"http", d.port(&dst.Ports.HTTP)},
				{"gossip", d.port(&dst.Ports.Gossip)},
				{"raft", d.port(&dst.Ports.Raft)},
			})
		}},
		{"join", d.strings(&dst.Join, " (host:port gossip addresses)")},
		{"bootstrap_expect", d.integer(&dst.BootstrapExpect)},
		{"tags", d.stringMap(&dst.Tags)},
	})
}

func (d *decoder) port(dst *int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v := -1
		d.integer(&v)(n, path)
		switch {
		case v == -1:
		case v < 1 || v > 65535:
			d.errorf(n, path, "port %d: want 1 to 65535", v)
		default:
			*dst = v
		}
	}
}

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,127})$`)

func (d *decoder) checkNode(n *yaml.Node, node *Node) {
	fieldNode := fieldsOf(n)
	at := func(key string) *yaml.Node {
		if v := fieldNode[key]; v != nil {
			return v
		}
		return n
	}
	if !nodeNameRE.MatchString(node.Name) && !d.failed["node.name"] {
		d.errorf(at("name"), "node.name", "%q: want 1-128 letters, digits, '.', '_' or '-' (default: the host name)", node.Name)
	}
	if node.DataDir == "" && !d.failed["node.data_dir"] {
		d.errorf(at("data_dir"), "node.data_dir", "must not be empty")
	}
	bind := net.ParseIP(node.Bind)
	if bind == nil && !d.failed["node.bind"] {
		d.errorf(at("bind"), "node.bind", "%q: want an IP address such as 127.0.0.1 or 0.0.0.0", node.Bind)
	}
	switch {
	case node.Advertise == "" && bind != nil && bind.IsUnspecified():
		d.errorf(at("bind"), "node.advertise", "required when bind is %s: the address peers dial", node.Bind)
	case node.Advertise != "" && !d.failed["node.advertise"]:
		if ip := net.ParseIP(node.Advertise); ip == nil || ip.IsUnspecified() {
			d.errorf(at("advertise"), "node.advertise", "%q: want the IP address peers dial", node.Advertise)
		}
	}
	p := node.Ports
	if p.HTTP == p.Gossip || p.HTTP == p.Raft || p.Gossip == p.Raft {
		d.errorf(at("ports"), "node.ports", "http %d, gossip %d and raft %d must differ", p.HTTP, p.Gossip, p.Raft)
	}
	if v := fieldNode["join"]; v != nil && v.Kind == yaml.SequenceNode {
		for i, addr := range node.Join {
			if err := checkHostPort(addr); err != nil && i < len(v.Content) {
				d.errorf(v.Content[i], fmt.Sprintf("node.join[%d]", i), "%v", err)
			}
		}
	}
	switch {
	case node.BootstrapExpect < 0:
		d.errorf(at("bootstrap_expect"), "node.bootstrap_expect", "%d: must not be negative", node.BootstrapExpect)
	case !node.Server && node.BootstrapExpect > 0:
		d.errorf(at("bootstrap_expect"), "node.bootstrap_expect", "only a server bootstraps; a worker (server: false) joins")
	case node.Server && node.BootstrapExpect == 0 && len(node.Join) == 0:
		d.errorf(at("bootstrap_expect"), "node.bootstrap_expect", "a server with no join addresses must bootstrap: set bootstrap_expect (1 for a single node), or join peers")
	}
	for k := range node.Tags {
		if k == "" {
			d.errorf(at("tags"), "node.tags", "empty tag name")
		}
	}
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port, such as 10.0.0.2:7946", addr)
	}
	if host == "" {
		return fmt.Errorf("%q: the host is missing", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q: want 1 to 65535", addr, port)
	}
	return nil
}

// The cluster section.

func (d *decoder) cluster(n *yaml.Node, path string, dst *Cluster) {
	d.mapping(n, path, []field{
		{"secret", d.secret(&dst.Secret, "${FENCECRON_SECRET}")},
		{"previous_secret", d.secret(&dst.PreviousSecret, "${FENCECRON_PREVIOUS_SECRET}")},
		{"profile", d.str(&dst.Profile)},
		{"reap_after", d.duration(&dst.ReapAfter)},
		{"tls", d.tlsFiles(&dst.TLS, true)},
	})
}

// tlsFiles decodes cluster.tls (withCA) or api.tls: PEM files that go
// together. Whether they can be read and what they hold is checked when
// the node starts.
func (d *decoder) tlsFiles(dst *TLSFiles, withCA bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		fields := []field{{"cert_file", d.str(&dst.CertFile)}, {"key_file", d.str(&dst.KeyFile)}}
		if withCA {
			fields = append([]field{{"ca_file", d.str(&dst.CAFile)}}, fields...)
		}
		seen := d.mapping(n, path, fields)
		if len(seen) == 0 {
			return
		}
		want := "cert_file and key_file"
		missing := dst.CertFile == "" || dst.KeyFile == ""
		if withCA {
			want = "ca_file, cert_file and key_file"
			missing = missing || dst.CAFile == ""
		}
		if missing {
			d.errorf(n, path, "give %s together (PEM files)", want)
		}
	}
}

func (d *decoder) checkCluster(n, root *yaml.Node, c *Cluster) {
	at := n
	if at == nil {
		at = root
	}
	fieldNode := fieldsOf(n)
	if v := fieldNode["secret"]; v != nil {
		at = v
	}
	switch {
	case d.failed["cluster.secret"]:
	case c.Secret == "":
		d.errorf(at, "cluster.secret", "required for a node: it keys gossip encryption, internal RPC and token signing (use ${FENCECRON_SECRET})")
	default:
		if err := CheckSecret(c.Secret); err != nil {
			d.errorf(at, "cluster.secret", "%v", err)
		}
	}
	if pn := fieldNode["previous_secret"]; pn != nil && c.PreviousSecret != "" && !d.failed["cluster.previous_secret"] {
		if err := CheckSecret(c.PreviousSecret); err != nil {
			d.errorf(pn, "cluster.previous_secret", "%v", err)
		} else if c.PreviousSecret == c.Secret {
			d.errorf(pn, "cluster.previous_secret", "the same as cluster.secret: during a roll it holds the old secret; otherwise leave it out")
		}
	}
	if c.Profile == "" {
		c.Profile = DefaultProfile
	}
	if c.Profile != ProfileDefault && c.Profile != ProfileFast && !d.failed["cluster.profile"] {
		pn := fieldNode["profile"]
		if pn == nil {
			pn = n
		}
		d.errorf(pn, "cluster.profile", "%q: want default or fast", c.Profile)
	}
}

// The api section.

func (d *decoder) api(n *yaml.Node, path string, dst *API) {
	d.mapping(n, path, []field{
		{"token", func(v *yaml.Node, p string) {
			d.secret(&dst.Token, "${FENCECRON_API_TOKEN}")(v, p)
			if dst.Token == "" || d.failed[p] {
				return
			}
			if err := CheckSecret(dst.Token); err != nil {
				d.errorf(v, p, "%v (or no token: then only clients on this host may change things)", err)
			}
		}},
		{"read_only", d.boolean(&dst.ReadOnly)},
		{"tls", d.tlsFiles(&dst.TLS, false)},
		{"allowed_hosts", func(v *yaml.Node, p string) {
			d.strings(&dst.AllowedHosts, " (host names, or host:port)")(v, p)
			if v.Kind != yaml.SequenceNode || d.failed[p] {
				return
			}
			for i, h := range dst.AllowedHosts {
				if err := checkAllowedHost(h); err != nil && i < len(v.Content) {
					d.errorf(v.Content[i], fmt.Sprintf("%s[%d]", p, i), "%v", err)
				}
			}
		}},
		{"limits", func(v *yaml.Node, p string) {
			l := &dst.Limits
			nonNegDuration := func(dst *time.Duration) func(*yaml.Node, string) {
				return func(v *yaml.Node, p string) {
					d.duration(dst)(v, p)
					if *dst < 0 {
						d.errorf(v, p, "%s: must not be negative (leave it out for the default)", *dst)
					}
				}
			}
			positive := func(dst *int) func(*yaml.Node, string) {
				return func(v *yaml.Node, p string) {
					d.integer(dst)(v, p)
					if *dst < 0 {
						d.errorf(v, p, "%d: must not be negative (leave it out for the default)", *dst)
					}
				}
			}
			d.mapping(v, p, []field{
				{"read_header_timeout", nonNegDuration(&l.ReadHeaderTimeout)},
				{"read_timeout", nonNegDuration(&l.ReadTimeout)},
				{"write_timeout", nonNegDuration(&l.WriteTimeout)},
				{"idle_timeout", nonNegDuration(&l.IdleTimeout)},
				{"max_header_bytes", func(v *yaml.Node, p string) {
					d.size(&l.MaxHeaderBytes)(v, p)
					if l.MaxHeaderBytes < 0 || l.MaxHeaderBytes > 1<<30 {
						d.errorf(v, p, "%d: want 0 (the default) to 1GiB", l.MaxHeaderBytes)
					}
				}},
				{"max_connections", positive(&l.MaxConnections)},
				{"max_connections_per_client", positive(&l.MaxConnectionsPerClient)},
				{"max_event_streams", positive(&l.MaxEventStreams)},
				{"event_heartbeat", nonNegDuration(&l.EventHeartbeat)},
			})
		}},
	})
}

// secret decodes a secret like str, and remembers it if the file holds
// it literally; ref is the ${NAME} a warning suggests instead.
func (d *decoder) secret(dst *string, ref string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		d.str(dst)(n, path)
		if n.Kind == yaml.ScalarNode && !isNull(n) && literalSecret(n.Value) {
			d.literals = append(d.literals, Problem{Pos: Pos{File: d.file, Line: n.Line, Column: n.Column}, Path: path, Msg: ref})
		}
	}
}

// checkAllowedHost checks an api.allowed_hosts entry: a host name or IP
// address, optionally with a port; no scheme, path or wildcard.
func checkAllowedHost(s string) error {
	if strings.ContainsAny(s, "/*") {
		return fmt.Errorf("%q: want a host name such as cron.example.com, or host:port (no scheme, path or wildcard)", clip(s, 60))
	}
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: port %q: want 1 to 65535", s, port)
		}
		host = h
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if !hostNameRE.MatchString(host) {
		return fmt.Errorf("%q: want a host name such as cron.example.com, or host:port (no scheme, path or wildcard)", clip(s, 60))
	}
	return nil
}

var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})\.?$`)

// The store section.

func (d *decoder) store(n *yaml.Node, path string, dst *Store) {
	d.mapping(n, path, []field{
		{"backend", d.str(&dst.Backend)},
		{"path", d.str(&dst.Path)},
		{"url", d.str(&dst.URL)},
		{"serve", d.boolean(&dst.Serve)},
		{"max_body_bytes", d.size(&dst.MaxBodyBytes)},
		{"history_retention", d.integer(&dst.HistoryRetention)},
		{"quota", func(v *yaml.Node, p string) {
			d.mapping(v, p, []field{
				{"keys", d.integer(&dst.Quota.Keys)},
				{"bytes", d.size(&dst.Quota.Bytes)},
			})
		}},
	})
}

func (d *decoder) checkStore(n *yaml.Node, s *Store) {
	fieldNode := fieldsOf(n)
	at := func(key string) *yaml.Node {
		if v := fieldNode[key]; v != nil {
			return v
		}
		return n
	}
	if s.Backend == "" {
		s.Backend = DefaultBackend
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.HistoryRetention == 0 {
		s.HistoryRetention = DefaultHistoryRetention
	}
	if s.Quota.Keys == 0 {
		s.Quota.Keys = DefaultQuotaKeys
	}
	if s.Quota.Bytes == 0 {
		s.Quota.Bytes = DefaultQuotaBytes
	}
	switch s.Backend {
	case BackendBolt:
		if s.Path == "" {
			s.Path = DefaultStorePath
		}
		if s.URL != "" {
			d.errorf(at("url"), "store.url", "only for backend postgres or remote; bolt uses path")
		}
	case BackendPostgres:
		if err := checkPostgresURL(s.URL); err != nil && !d.failed["store.url"] {
			d.errorf(at("url"), "store.url", "%v", err)
		}
	case BackendRemote:
		if err := checkRemoteURL(s.URL); err != nil && !d.failed["store.url"] {
			d.errorf(at("url"), "store.url", "%v", err)
		}
		if s.Serve {
			d.errorf(at("serve"), "store.serve", "a node whose store is remote cannot serve it; serve it from the node that holds it")
		}
	default:
		if d.failed["store.backend"] {
			break
		}
		d.errorf(at("backend"), "store.backend", "%q: want bolt, postgres or remote", s.Backend)
	}
	if s.MaxBodyBytes < 0 {
		d.errorf(at("max_body_bytes"), "store.max_body_bytes", "%d: must be positive", s.MaxBodyBytes)
	}
	if s.HistoryRetention < 0 {
		d.errorf(at("history_retention"), "store.history_retention", "%d: must be positive", s.HistoryRetention)
	}
	quotaNode := fieldsOf(fieldNode["quota"])
	quotaAt := func(key string) *yaml.Node {
		if v := quotaNode[key]; v != nil {
			return v
		}
		return at("quota")
	}
	if s.Quota.Keys < 0 && !d.failed["store.quota.keys"] {
		d.errorf(quotaAt("keys"), "store.quota.keys", "%d: must be positive", s.Quota.Keys)
	}
	if s.Quota.Bytes < 0 && !d.failed["store.quota.bytes"] {
		d.errorf(quotaAt("bytes"), "store.quota.bytes", "%d: must be positive", s.Quota.Bytes)
	}
}

func checkPostgresURL(s string) error {
	switch {
	case s == "":
		return errors.New("required for backend postgres: a DSN such as postgres://fencecron@db:5432/fencecron")
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return errors.New("want a postgres:// or postgresql:// URL, or a key=value DSN")
		}
	case !strings.Contains(s, "="):
		return errors.New("want a postgres:// or postgresql:// URL, or a key=value DSN")
	}
	return nil
}

func checkRemoteURL(s string) error {
	if s == "" {
		return errors.New("required for backend remote: http://host:port of the node that serves the store")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want http://host:port or https://host:port", clip(s, 60))
	}
	return nil
}

// The jobs section.

// jobNodes remembers where each field of one job was written.
type jobNodes struct {
	job    *yaml.Node
	fields map[string]*yaml.Node
	dst    map[string]*yaml.Node
	failed map[string]bool // fields that did not decode
}

func (d *decoder) jobList(n *yaml.Node, maxBody int64) []jobs.Spec {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "jobs", "expected a list of jobs, got %s", describe(n))
		return nil
	}
	var out []jobs.Spec
	names := map[string]int{}
	for i, jn := range n.Content {
		path := fmt.Sprintf("jobs[%d]", i)
		if jn.Kind == yaml.AliasNode {
			d.errorf(jn, path, "aliases (*%s) are not supported; write the job out", jn.Value)
			continue
		}
		spec, where, ok := d.job(jn, path)
		if !ok {
			continue
		}
		if line, dup := names[spec.Name]; dup && spec.Name != "" {
			d.errorf(where.at("name"), path+".name", "%q is already the name of the job on line %d", spec.Name, line)
		} else {
			names[spec.Name] = jn.Line
		}
		d.checkJob(&spec, where, path, maxBody)
		spec.Normalize()
		out = append(out, spec)
	}
	return out
}

func (w *jobNodes) at(field string) *yaml.Node {
	if v := w.fields[field]; v != nil {
		return v
	}
	return w.job
}

func (d *decoder) job(n *yaml.Node, path string) (jobs.Spec, *jobNodes, bool) {
	var s jobs.Spec
	where := &jobNodes{job: n, failed: map[string]bool{}}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a job (a mapping with name, schedule, command, ...), got %s", describe(n))
		return s, nil, false
	}
	var schedule string
	var timeout, leaseTTL, backoff, catchup, jitter time.Duration
	// track records whether a field's decoder reported a problem.
	track := func(name string, fn func(*yaml.Node, string)) field {
		return field{name, func(v *yaml.Node, p string) {
			before := len(d.probs)
			fn(v, p)
			if len(d.probs) > before {
				where.failed[name] = true
			}
		}}
	}
	where.fields = d.mapping(n, path, []field{
		track("name", d.str(&s.Name)),
		track("schedule", d.str(&schedule)),
		track("schedules", d.strings(&s.Schedules, "")),
		track("timezone", d.str(&s.Timezone)),
		track("dst", func(v *yaml.Node, p string) {
			where.dst = d.mapping(v, p, []field{
				{"spring", d.str(&s.DST.Spring)},
				{"fall", d.str(&s.DST.Fall)},
			})
		}),
		track("command", d.strings(&s.Command, ` such as ["/usr/bin/report", "--month", "previous"]; for a command line use shell:`)),
		track("shell", d.str(&s.Shell)),
		track("env", d.stringMap(&s.Env)),
		track("dir", d.str(&s.Dir)),
		track("output", d.str(&s.Output)),
		track("timeout", d.duration(&timeout)),
		track("lease_ttl", d.duration(&leaseTTL)),
		track("retries", d.integer(&s.Retries)),
		track("backoff", d.duration(&backoff)),
		track("overlap", d.str(&s.Overlap)),
		track("misfire", d.str(&s.Misfire)),
		track("catchup_window", d.duration(&catchup)),
		track("target", d.stringMap(&s.Target)),
		track("max_output_bytes", d.size(&s.MaxOutputBytes)),
		track("paused", d.boolean(&s.Paused)),
		track("jitter", d.duration(&jitter)),
	})
	s.Timeout, s.LeaseTTL, s.Backoff = jobs.Duration(timeout), jobs.Duration(leaseTTL), jobs.Duration(backoff)
	s.CatchupWindow, s.Jitter = jobs.Duration(catchup), jobs.Duration(jitter)
	_, hasOne := where.fields["schedule"]
	_, hasMany := where.fields["schedules"]
	switch {
	case hasOne && hasMany:
		d.errorf(where.fields["schedules"], path+".schedules", "give schedule or schedules, not both")
		where.failed["schedules"] = true
	case hasOne:
		s.Schedules = []string{schedule}
	}
	return s, where, true
}

// checkJob validates a decoded job and reports each problem at the field
// it concerns.
func (d *decoder) checkJob(s *jobs.Spec, w *jobNodes, path string, maxBody int64) {
	var se *jobs.SpecError
	if err := s.Validate(jobs.Limits{MaxBodyBytes: maxBody}); errors.As(err, &se) {
		for _, p := range se.Problems {
			field, _, _ := strings.Cut(p.Field, ".")
			if w.failed[field] || (field == "schedules" && w.failed["schedule"]) {
				continue // already reported as it was decoded
			}
			n, fpath := d.jobFieldNode(w, p), path+"."+p.Field
			if p.Index >= 0 {
				fpath = fmt.Sprintf("%s[%d]", fpath, p.Index)
			}
			if p.Field == "" {
				fpath = path
			}
			if _, one := w.fields["schedule"]; one && p.Field == "schedules" {
				fpath = path + ".schedule"
			}
			d.errorf(n, fpath, "%s", p.Msg)
		}
	}
}

// jobFieldNode finds the node a jobs.FieldError is about.
func (d *decoder) jobFieldNode(w *jobNodes, p jobs.FieldError) *yaml.Node {
	field, sub, nested := strings.Cut(p.Field, ".")
	switch {
	case nested && field == "dst":
		if v := w.dst[sub]; v != nil {
			return v
		}
		return w.at("dst")
	case field == "schedules" || field == "schedule":
		if v := w.fields["schedule"]; v != nil {
			return v
		}
		if v := w.fields["schedules"]; v != nil && v.Kind == yaml.SequenceNode && p.Index >= 0 && p.Index < len(v.Content) {
			return v.Content[p.Index]
		}
		return w.at("schedules")
	case field == "command":
		if v := w.fields["command"]; v != nil && v.Kind == yaml.SequenceNode && p.Index >= 0 && p.Index < len(v.Content) {
			return v.Content[p.Index]
		}
	case p.Key != "":
		if v := w.fields[field]; v != nil && v.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(v.Content); i += 2 {
				if v.Content[i].Value == p.Key {
					return v.Content[i]
				}
			}
		}
	}
	return w.at(field)
}

func isMapping(n *yaml.Node) bool { return n != nil && (n.Kind == yaml.MappingNode || isNull(n)) }

// fieldsOf returns the value node of each key of a mapping node.
func fieldsOf(n *yaml.Node) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if n == nil || n.Kind != yaml.MappingNode {
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if _, dup := out[n.Content[i].Value]; !dup {
			out[n.Content[i].Value] = n.Content[i+1]
		}
	}
	return out
}

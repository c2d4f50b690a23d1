// Package config reads fencecron's YAML config file: the node, the
// cluster, the store, the public API and the jobs. The reference file,
// with every field and its default, is deploy/examples/fencecron.yaml.
//
// Parsing is strict: unknown fields, wrong types, bad values and
// references to unset environment variables are all errors, and all of
// them are reported together, each with file:line:column. Defaults are
// applied to what the file leaves out.
//
// The file is decoded into the tagged types below (the jobs section
// straight into jobs.Spec), then checked; each job with jobs.Spec.Validate,
// the validation the leader applies to every job set too.
//
// ${NAME} is replaced by the environment variable NAME in the node,
// cluster, store and api sections (for secrets such as cluster.secret, a
// PostgreSQL URL, api.token). The jobs section is taken literally: job specs are
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
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/cmd/internal/atomicfile"

	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/scheduler"
)

// Defaults for what the file leaves out. Each is the owning package's:
// this file states none of its own but the node's data directory, ports
// and store file, which only the config file knows. api.limits left at
// zero take web.DefaultLimits in the web server.
const (
	DefaultDataDir          = "/var/lib/fencecron"
	DefaultBind             = election.DefaultBindAddr
	DefaultHTTPPort         = 8080
	DefaultGossipPort       = 7946
	DefaultRaftPort         = 7947
	DefaultProfile          = ProfileDefault
	DefaultReapAfter        = election.DefaultReapAfter
	DefaultMaxClockSkew     = scheduler.DefaultMaxClockSkew
	DefaultBackend          = BackendBolt
	DefaultStorePath        = "store.db"
	DefaultMaxBodyBytes     = fencedstore.DefaultMaxBodyBytes
	DefaultHistoryRetention = fencedstore.DefaultHistoryRetention
	DefaultQuotaKeys        = fencedstore.DefaultQuotaKeys
	DefaultQuotaBytes       = fencedstore.DefaultQuotaBytes
	DefaultKeepVersions     = fencedstore.DefaultKeepVersions
	DefaultTombstoneTTL     = fencedstore.DefaultTombstoneTTL
	DefaultJobNice          = 10
	// MaxMaxAttempts bounds node.max_attempts.
	MaxMaxAttempts = 100_000
)

// DefaultAddr is the HTTP address of a node left at its defaults: where
// the CLI looks for one.
var DefaultAddr = net.JoinHostPort(DefaultBind, strconv.Itoa(DefaultHTTPPort))

// Cluster profiles (election's).
const (
	ProfileDefault = election.ProfileDefault
	ProfileFast    = election.ProfileFast // shorter Raft and gossip timeouts, for tests and demos
)

// Store backends.
const (
	BackendBolt     = "bolt"
	BackendPostgres = "postgres"
	BackendRemote   = "remote"
)

// Limits on the file.
const (
	// MaxFileSize bounds one file: a node's config, or a file of jobs
	// (fencecron apply, jobs_dir). 100,000 jobs written plainly take 10
	// to 20 MiB of YAML; the job set they make is bounded again as a
	// whole (jobs.MaxJobs, jobs.MaxSetBytes).
	MaxFileSize = 64 << 20
	// MinSecretLength is the shortest cluster.secret or api.token
	// accepted: the signer's (see CheckSecret for the other rules).
	MinSecretLength = fencedstore.MinSecretLen
)

// Section names.
const (
	SectionNode      = "node"
	SectionCluster   = "cluster"
	SectionStore     = "store"
	SectionJobs      = "jobs"
	SectionAPI       = "api"
	SectionNotify    = "notify"
	SectionGroups    = "groups"
	SectionLog       = "log"
	SectionTelemetry = "telemetry"
	SectionACL       = "acl"
)

// File is a whole config file, with defaults applied.
type File struct {
	Node    Node
	Cluster Cluster
	Store   Store
	API     API
	// Notify is the cluster-wide notify: section (notify.go).
	Notify Notify
	// Log is how this node writes its log (log.go).
	Log Log
	// Telemetry is where this node sends its traces (telemetry.go).
	Telemetry Telemetry
	// ACL is the acl section: access control (docs/teams-and-access.md).
	ACL ACL
	// Jobs are validated and normalized, in file order; with
	// Node.JobsDir, only this file's (see LoadNodeJobs).
	Jobs []jobs.Spec
	// Groups are the concurrency groups the file defines (groups:); each
	// of its jobs with a group carries that group's limits.
	Groups []jobs.Group

	// Warnings are things Load found wrong that do not stop the node,
	// such as a literal secret in a file others may read. Parse never
	// sets them (it knows no file mode).
	Warnings []Problem
	// Unset are the ${NAME} references whose variable was not set, where
	// LoadAllowUnset read the file; their fields are left at defaults.
	Unset []Problem

	// Name is the file name problems are reported against.
	Name string
	// jobPos is, per job, where its name is written.
	jobPos   []Pos
	sections map[string]bool
	envUsed  []string
	// literals are the secrets written into the file itself rather than
	// taken from the environment.
	literals []Problem
}

// sections is the file as written: the decoder's schema of the top level.
// The yaml tags of the types below (and of jobs.Spec) are the schema of
// everything else; the order of their fields is the order problems list
// the fields in.
type sections struct {
	Node      Node         `yaml:"node"`
	Cluster   Cluster      `yaml:"cluster"`
	Store     Store        `yaml:"store"`
	API       API          `yaml:"api"`
	Notify    Notify       `yaml:"notify"`
	Jobs      []jobEntry   `yaml:"jobs"`
	Groups    []jobs.Group `yaml:"groups"`
	Log       Log          `yaml:"log"`
	Telemetry Telemetry    `yaml:"telemetry"`
	ACL       ACL          `yaml:"acl"`
}

// ACL is the acl section: with Enabled, every request to the public API
// and the dashboard needs a token whose policies grant what its route
// needs (web/auth.Routes); api.token stays a management token. Every
// server of a cluster should agree.
type ACL struct {
	Enabled bool `yaml:"enabled"`
}

// jobEntry is one job as the file writes it: schedule, the shorthand for
// a one-element schedules, and a jobs.Spec, whose yaml tags name its
// fields.
type jobEntry struct {
	Schedule  string `yaml:"schedule"`
	jobs.Spec `yaml:",inline"`

	path string // jobs[i]
	line int
	// namePos is where the job's name is written (or, without one, the
	// job): found while the job's nodes are at hand (decoder.job).
	namePos Pos
}

// Node is the node section: this process's identity and addresses.
type Node struct {
	// Name is unique in the cluster; default: the host name.
	Name    string `yaml:"name"`
	DataDir string `yaml:"data_dir"`
	// Server nodes vote in Raft; false makes a worker. Default true.
	Server bool `yaml:"server"`
	// RunJobs false keeps jobs off this node (e.g. the node that serves
	// the store). Default true.
	RunJobs bool `yaml:"run_jobs"`
	// Bind is the listen address; Advertise, what peers dial, defaults
	// to it (and is required when Bind is 0.0.0.0 or ::).
	Bind      string `yaml:"bind"`
	Advertise string `yaml:"advertise"`
	Ports     Ports  `yaml:"ports"`
	// Join lists gossip addresses of peers: host:port, or a host alone
	// (this node's gossip port). Hosts may be names, resolved again on
	// every attempt to join.
	Join []string `yaml:"join"`
	// BootstrapExpect is how many servers to wait for before the first
	// election; 0 means join an existing cluster.
	BootstrapExpect int               `yaml:"bootstrap_expect"`
	Tags            map[string]string `yaml:"tags"`
	// JobsDir, if set, is a directory of job files (*.yaml, *.yml, each
	// with only a jobs section) whose jobs join this file's: a job set
	// too large for one file, or kept in one file per team. A relative
	// path is relative to the directory of this config file. Names are
	// unique across all of them.
	JobsDir string `yaml:"jobs_dir"`
	// JobNice is how many nice levels below this node its jobs' processes
	// run (0 to 19; 0: at the node's own priority; never below nice 19).
	// A burst of job starts then cannot starve the node's Raft and lease
	// traffic: its threads run first when they wake, and the jobs get
	// everything else.
	JobNice int `yaml:"job_nice"`
	// MaxAttempts is how many attempts this node holds open at once
	// (running, or granted and waiting for their fire time; an HTTP job's
	// counts an eighth, jobs.Spec.AttemptLoad). Once every
	// node a job may run on holds its limit, the leader records the job's
	// fire times as skipped (overloaded) instead of queueing work no
	// node can start, and retries, backfills and admitted runs wait.
	MaxAttempts int `yaml:"max_attempts"`
}

// Ports are a node's listening ports.
type Ports struct {
	HTTP   int `yaml:"http"`
	Gossip int `yaml:"gossip"`
	Raft   int `yaml:"raft"`
}

// Cluster is the cluster section.
type Cluster struct {
	// Secret keys gossip encryption, internal RPC auth and token signing
	// (see package keyring).
	Secret string `yaml:"secret"`
	// PreviousSecret, while rolling to a new Secret, is accepted too: set
	// it to the old secret on every node, then remove it everywhere.
	PreviousSecret string `yaml:"previous_secret"`
	// Profile is "default" or "fast".
	Profile string `yaml:"profile"`
	// ReapAfter is how long a server may be gone from gossip before the
	// leader removes it from the Raft voters (never below
	// bootstrap_expect). Default: election.DefaultReapAfter.
	ReapAfter time.Duration `yaml:"reap_after"`
	// TLS is an operator's own PKI for the links between nodes; empty,
	// the PKI is derived from Secret.
	TLS TLSFiles `yaml:"tls"`
	// History is the run history each server keeps for a job that says
	// nothing of its own (jobs.Spec.History); the same on every server.
	// Default: jobs.DefaultHistory.
	History jobs.History `yaml:"history"`
	// MaxClockSkew is how far another node's wall clock may be from this
	// one's before it is flagged (metric, audit entry, dashboard
	// warning); it decides nothing. Default: scheduler.DefaultMaxClockSkew.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
}

// Store is the store section.
type Store struct {
	// Backend is "bolt", "postgres" or "remote".
	Backend string `yaml:"backend"`
	// Path is the bolt file; relative to the node's data_dir.
	Path string `yaml:"path"`
	// URL is the PostgreSQL DSN (postgres) or http://host:port of the
	// node serving the store (remote).
	URL string `yaml:"url"`
	// Serve exposes this node's store over HTTP.
	Serve bool `yaml:"serve"`
	// MaxBodyBytes caps one stored body.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// HistoryRetention is how many decisions the store keeps per key,
	// oldest dropped first.
	HistoryRetention int `yaml:"history_retention"`
	// Quota bounds what the keys under one job token's scope may hold,
	// for writes through this node's HTTP store (serve: true).
	Quota Quota `yaml:"quota"`
	// Retention says how long, or how many of, the keys under a prefix
	// are kept. The node that holds the store (bolt or postgres) enforces
	// it; a remote store's is set on the node that serves it.
	Retention []RetentionRule `yaml:"retention"`
	// KeepVersions is how many bodies of a key are kept, the current
	// one included, readable with ?version=N and `get -version N`.
	KeepVersions int `yaml:"keep_versions"`
	// TombstoneTTL is how long a deleted key's greatest token is kept
	// as its tombstone; it must be longer than any job's token is good
	// for (timeout + lease_ttl + 2m). See fencedstore.Retention.
	TombstoneTTL jobs.Duration `yaml:"tombstone_ttl"`
}

// RetentionRule is one entry of store.retention.
type RetentionRule struct {
	Prefix  string        `yaml:"prefix"`
	MaxAge  jobs.Duration `yaml:"max_age"`
	MaxKeys int           `yaml:"max_keys"`
}

// Quota is store.quota: the most keys and body bytes under one job
// token's scope ("reports/").
type Quota struct {
	Keys  int   `yaml:"keys"`
	Bytes int64 `yaml:"bytes"`
}

// API is the api section: who may change things through this node's
// public HTTP API and dashboard. The internal API between nodes has its
// own credential (cluster.secret) and ignores it.
type API struct {
	// Token, if set, is required by every mutating public endpoint
	// (trigger, pause, resume, PUT /api/v1/jobset, the dashboard's
	// buttons): as "Authorization: Bearer TOKEN", or by logging in to the
	// dashboard with it. Empty: anyone who can reach the port may act.
	Token string `yaml:"token"`
	// ReadOnly refuses every mutating public endpoint on this node with
	// 403, whatever the token, and hides the dashboard's buttons.
	ReadOnly bool `yaml:"read_only"`
	// TLS, if set, serves the dashboard and the public API over HTTPS
	// with this certificate (CAFile unused: api.tls refuses ca_file).
	TLS TLSFiles `yaml:"tls"`
	// AllowedHosts are the names (host, or host:port) plain-HTTP requests
	// may address this node by, besides loopback names, IP addresses and
	// the node's own name: a Host header naming anything else is refused,
	// so a web page cannot rebind its own DNS name to this node's address
	// and talk to it from a browser (DNS rebinding).
	AllowedHosts []string `yaml:"allowed_hosts"`
	// Limits bound the public HTTP server.
	Limits Limits `yaml:"limits"`
}

// Limits are the public HTTP server's limits (api.limits). A field left
// at zero takes web.DefaultLimits' value, there and nowhere else;
// deploy/examples/fencecron.yaml shows them.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers, ReadTimeout
	// the whole request with its body, WriteTimeout writing a response
	// (event streams manage their own), IdleTimeout a keep-alive
	// connection waiting for its next request.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	WriteTimeout      time.Duration `yaml:"write_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes caps a request's headers.
	MaxHeaderBytes int64 `yaml:"max_header_bytes"`
	// MaxConnections caps the connections served at once; more wait to
	// be accepted. MaxConnectionsPerClient caps those of one client
	// address (not loopback); more are closed. MaxEventStreams caps open
	// /api/v1/events streams; one more gets 503.
	MaxConnections          int `yaml:"max_connections"`
	MaxConnectionsPerClient int `yaml:"max_connections_per_client"`
	MaxEventStreams         int `yaml:"max_event_streams"`
	// EventHeartbeat is how often an idle event stream sends a comment,
	// so proxies keep it and dead clients are noticed.
	EventHeartbeat time.Duration `yaml:"event_heartbeat"`
}

// TLSFiles are the PEM files of a certificate (cluster.tls, api.tls):
// the CAs to trust (cluster.tls only), the certificate with its
// intermediates, and its key.
type TLSFiles struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
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
	// Unset are, where LoadAllowUnset read the file, its ${NAME}s whose
	// variable is not set: not problems, and not in Error().
	Unset []Problem
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
func Load(path string) (*File, error) { return load(path, false) }

// LoadAllowUnset is Load, except that a ${NAME} whose variable is not set
// is listed in File.Unset instead of making the file invalid: what
// validate (a file checked in CI, without the secrets) and apply (which
// sends only the jobs, where nothing is expanded) read.
func LoadAllowUnset(path string) (*File, error) { return load(path, true) }

// ParseAllowUnset is LoadAllowUnset of a file's content, read already
// (it knows no file mode, so it sets no Warnings).
func ParseAllowUnset(name string, data []byte) (*File, error) {
	return parseWith(name, data, os.LookupEnv, os.Hostname, true)
}

func load(path string, unsetOK bool) (*File, error) {
	data, info, err := atomicfile.Read(path, MaxFileSize+1)
	if err != nil {
		return nil, err
	}
	file, err := parseWith(path, data, os.LookupEnv, os.Hostname, unsetOK)
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
	return parseWith(name, data, lookup, hostname, false)
}

func parseWith(name string, data []byte, lookup func(string) (string, bool), hostname func() (string, error), unsetOK bool) (*File, error) {
	d := newDecoder(name, lookup)
	d.unsetOK = unsetOK
	if len(data) > MaxFileSize {
		d.errorf(nil, "", "larger than %d bytes", MaxFileSize)
		return nil, d.result()
	}
	root, ok := d.document(data)
	if !ok {
		return nil, d.result()
	}

	// Decode every section over its defaults, then check what the
	// types cannot say, section by section, each problem at the field
	// it is about.
	doc := defaults(hostname)
	d.decodeRoot(root, &doc)
	if doc.Node.Advertise == "" {
		if ip := net.ParseIP(doc.Node.Bind); ip != nil && !ip.IsUnspecified() {
			doc.Node.Advertise = doc.Node.Bind
		}
	}
	// Check sections that decoded as mappings (or, for cluster, are
	// missing); the others have been reported already.
	if d.isMapping(SectionNode) {
		d.checkNode(&doc.Node)
	}
	if d.has(SectionNode) && (!d.has(SectionCluster) || d.isMapping(SectionCluster)) {
		d.checkCluster(&doc.Cluster)
	}
	if d.isMapping(SectionStore) {
		d.checkStore(&doc.Store)
	}
	if d.isMapping(SectionCluster) {
		d.checkTLS("cluster.tls", &doc.Cluster.TLS, true)
	}
	if d.isMapping(SectionAPI) {
		d.checkAPI(&doc.API, &doc.Cluster)
	}
	if d.isMapping(SectionNotify) {
		d.checkNotify(&doc.Notify)
	}
	if d.isMapping(SectionLog) {
		d.checkLog(&doc.Log)
	}
	if d.isMapping(SectionTelemetry) {
		d.checkTelemetry(&doc.Telemetry)
	}
	f := &File{Node: doc.Node, Cluster: doc.Cluster, Store: doc.Store, API: doc.API, Notify: doc.Notify, Log: doc.Log, Telemetry: doc.Telemetry, ACL: doc.ACL, Name: name, sections: map[string]bool{}}
	for _, s := range []string{SectionNode, SectionCluster, SectionStore, SectionAPI, SectionNotify, SectionJobs, SectionLog, SectionTelemetry, SectionACL} {
		f.sections[s] = d.has(s)
	}
	f.Groups = d.checkGroups(doc.Groups, doc.Jobs)
	// A node's file without an SMTP server cannot send email; a file of
	// jobs alone (apply, jobs_dir) is checked against its node's.
	f.Jobs = d.checkJobs(doc.Jobs, jobs.Limits{MaxBodyBytes: doc.Store.MaxBodyBytes, NoSMTP: d.has(SectionNode) && doc.Notify.Host == ""})
	if doc.Node.JobsDir == "" {
		d.checkAfter(doc.Jobs, f.Jobs)
	}
	d.checkTombstoneTTL(doc.Store, doc.Jobs, f.Jobs)
	for k := range d.envUsed {
		f.envUsed = append(f.envUsed, k)
	}
	f.literals = d.literals
	f.jobPos = d.jobPos
	f.Unset = d.unset
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
	if procs := runtime.GOMAXPROCS(0); procs > 1 && len(data) >= partsMin {
		if root, ok := parseParts(data, procs, d); ok {
			return root, true
		}
	}
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
	return &Error{Problems: d.probs, Unset: d.unset}
}

// defaults returns the sections as a file that leaves everything out
// has them.
func defaults(hostname func() (string, error)) sections {
	name, _ := hostname()
	return sections{
		Node: Node{
			Name:    name,
			DataDir: DefaultDataDir,
			Server:  true,
			RunJobs: true,
			JobNice: DefaultJobNice,
			// Kept where the leader reads it, in gossip.
			MaxAttempts: election.DefaultMaxAttempts,
			Bind:        DefaultBind,
			Ports:       Ports{HTTP: DefaultHTTPPort, Gossip: DefaultGossipPort, Raft: DefaultRaftPort},
		},
		Cluster: Cluster{Profile: DefaultProfile, ReapAfter: DefaultReapAfter, History: jobs.DefaultHistory, MaxClockSkew: DefaultMaxClockSkew},
		Store: Store{
			Backend:          DefaultBackend,
			Path:             DefaultStorePath,
			MaxBodyBytes:     DefaultMaxBodyBytes,
			HistoryRetention: DefaultHistoryRetention,
			Quota:            Quota{Keys: DefaultQuotaKeys, Bytes: DefaultQuotaBytes},
			KeepVersions:     DefaultKeepVersions,
			TombstoneTTL:     jobs.Duration(DefaultTombstoneTTL),
		},
		Log:       Log{Format: DefaultLogFormat, Level: DefaultLogLevel},
		Telemetry: Telemetry{SampleRatio: DefaultSampleRatio},
	}
}

// Defaults returns the config of a file that leaves everything out:
// every default applied, the node named after this host, no section
// present (Has is false). Node.Advertise is left empty: a node then
// advertises its bind address. A node configured by flags rather than a
// file (`fencecron dev`) starts from it.
func Defaults() *File {
	doc := defaults(os.Hostname)
	return &File{Node: doc.Node, Cluster: doc.Cluster, Store: doc.Store, API: doc.API, Notify: doc.Notify, Log: doc.Log, Telemetry: doc.Telemetry, ACL: doc.ACL, sections: map[string]bool{}}
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

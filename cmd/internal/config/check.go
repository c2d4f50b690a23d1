package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/executor"
)

// The checks below run after decoding, on what the types cannot say:
// ranges, formats, fields that go together. Each reports at the field it
// is about (decoder.at), and stays quiet about a field whose decoding was
// already reported (decoder.failed).

// The node section.

// nodeNameRE and hostNameRE are compiled when first used: their bounded
// repeats compile to large programs, which every command that links this
// package (every `fencecron` command) otherwise paid for at its start, some
// 4 ms.
var nodeNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,127})$`) })

func (d *decoder) checkNode(node *Node) {
	at := func(field string) *yaml.Node { return d.at("node." + field) }
	if !nodeNameRE().MatchString(node.Name) && !d.failed["node.name"] {
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
	// A port out of range is reported and left at its default, so that
	// the check that ports differ is about the others.
	p := &node.Ports
	for _, port := range []struct {
		name string
		v    *int
		def  int
	}{{"http", &p.HTTP, DefaultHTTPPort}, {"gossip", &p.Gossip, DefaultGossipPort}, {"raft", &p.Raft, DefaultRaftPort}} {
		if *port.v < 1 || *port.v > 65535 {
			d.errorf(at("ports."+port.name), "node.ports."+port.name, "port %d: want 1 to 65535", *port.v)
			*port.v = port.def
		}
	}
	if p.HTTP == p.Gossip || p.HTTP == p.Raft || p.Gossip == p.Raft {
		d.errorf(at("ports"), "node.ports", "http %d, gossip %d and raft %d must differ", p.HTTP, p.Gossip, p.Raft)
	}
	for i, addr := range node.Join {
		p := fmt.Sprintf("node.join[%d]", i)
		if err := checkJoinAddr(addr); err != nil && !d.failed[p] {
			d.errorf(d.at(p), p, "%v", err)
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
	if node.MaxAttempts < 1 || node.MaxAttempts > MaxMaxAttempts {
		d.errorf(at("max_attempts"), "node.max_attempts", "%d: must be 1 to %d", node.MaxAttempts, MaxMaxAttempts)
	}
	if node.JobNice < 0 || node.JobNice > executor.MaxNice {
		d.errorf(at("job_nice"), "node.job_nice", "%d: must be 0 (the node's own priority) to %d (the lowest)", node.JobNice, executor.MaxNice)
	}
	for k := range node.Tags {
		if k == "" {
			d.errorf(at("tags"), "node.tags", "empty tag name")
		}
	}
}

// checkJoinAddr checks a node.join entry: host:port, or a host alone
// (gossip then dials it on this node's own gossip port). The host may be
// a name: election resolves it again on every attempt to join.
func checkJoinAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if validHost(addr) {
			return nil
		}
		return fmt.Errorf("%q: want host:port or a host, such as 10.0.0.2:7946 or fc2.example.internal", addr)
	}
	if host == "" {
		return fmt.Errorf("%q: the host is missing", addr)
	}
	if !validHost(host) {
		return fmt.Errorf("%q: host %q: want a host name or an IP address", addr, host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q: want 1 to 65535", addr, port)
	}
	return nil
}

// validHost reports whether s is an IP address or a host name.
func validHost(s string) bool { return net.ParseIP(s) != nil || hostNameRE().MatchString(s) }

// The cluster section.

func (d *decoder) checkCluster(c *Cluster) {
	at := d.at("cluster.secret")
	switch {
	case d.failed["cluster.secret"]:
	case c.Secret == "":
		d.errorf(at, "cluster.secret", "required for a node: it keys gossip encryption, internal RPC and token signing (use ${FENCECRON_SECRET})")
	default:
		if err := CheckSecret(c.Secret); err != nil {
			d.errorf(at, "cluster.secret", "%v", err)
		}
	}
	if d.has("cluster.previous_secret") && c.PreviousSecret != "" && !d.failed["cluster.previous_secret"] {
		pn := d.at("cluster.previous_secret")
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
		d.errorf(d.at("cluster.profile"), "cluster.profile", "%q: want default or fast", c.Profile)
	}
	if c.MaxClockSkew <= 0 && !d.failed["cluster.max_clock_skew"] {
		d.errorf(d.at("cluster.max_clock_skew"), "cluster.max_clock_skew", "%s: want a duration above zero, such as 500ms", c.MaxClockSkew)
	}
	// A job's zero means "the cluster's"; the cluster's has no one to
	// defer to.
	for _, p := range c.History.Check(false) {
		if path := "cluster.history." + p.Field; !d.failed[path] {
			d.errorf(d.at(path), path, "%s", p.Msg)
		}
	}
}

// checkTLS checks cluster.tls (withCA) or api.tls: PEM files that go
// together. Whether they can be read and what they hold is checked when
// the node starts.
func (d *decoder) checkTLS(path string, t *TLSFiles, withCA bool) {
	if !withCA && d.has(path+".ca_file") {
		d.errorf(d.keyAt(path+".ca_file"), path, `unknown field "ca_file": only cluster.tls takes CAs; clients verify api.tls's certificate with their own`)
		t.CAFile = ""
	}
	want, missing := "cert_file and key_file", t.CertFile == "" || t.KeyFile == ""
	given := d.has(path+".cert_file") || d.has(path+".key_file")
	if withCA {
		want, missing = "ca_file, cert_file and key_file", missing || t.CAFile == ""
		given = given || d.has(path+".ca_file")
	}
	if given && missing {
		d.errorf(d.at(path), path, "give %s together (PEM files)", want)
	}
}

// The store section.

func (d *decoder) checkStore(s *Store) {
	at := func(field string) *yaml.Node { return d.at("store." + field) }
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
	d.checkRetention(s)
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
		if !d.failed["store.backend"] {
			d.errorf(at("backend"), "store.backend", "%q: want bolt, postgres or remote", s.Backend)
		}
	}
	for _, n := range []struct {
		path string
		v    int64
	}{
		{"store.max_body_bytes", s.MaxBodyBytes},
		{"store.history_retention", int64(s.HistoryRetention)},
		{"store.quota.keys", int64(s.Quota.Keys)},
		{"store.quota.bytes", s.Quota.Bytes},
	} {
		if n.v < 0 && !d.failed[n.path] {
			d.errorf(d.at(n.path), n.path, "%d: must be positive", n.v)
		}
	}
}

// checkRetention checks store.retention, store.keep_versions and
// store.tombstone_ttl, and sets their defaults.
func (d *decoder) checkRetention(s *Store) {
	if s.KeepVersions == 0 {
		s.KeepVersions = DefaultKeepVersions
	}
	if s.TombstoneTTL == 0 {
		s.TombstoneTTL = jobs.Duration(DefaultTombstoneTTL)
	}
	if (s.KeepVersions < 1 || s.KeepVersions > fencedstore.MaxKeepVersions) && !d.failed["store.keep_versions"] {
		d.errorf(d.at("store.keep_versions"), "store.keep_versions", "%d: want 1 (the current body only) to %d", s.KeepVersions, fencedstore.MaxKeepVersions)
	}
	if s.TombstoneTTL < 0 && !d.failed["store.tombstone_ttl"] {
		d.errorf(d.at("store.tombstone_ttl"), "store.tombstone_ttl", "must be positive")
	}
	prefixes := map[string]int{}
	for i, r := range s.Retention {
		path := fmt.Sprintf("store.retention[%d]", i)
		if d.failed[path] || d.failed[path+".prefix"] || d.failed[path+".max_age"] || d.failed[path+".max_keys"] {
			continue
		}
		rule := fencedstore.RetentionRule{Prefix: r.Prefix, MaxAge: r.MaxAge.D(), MaxKeys: r.MaxKeys}
		if err := rule.Validate(); err != nil {
			d.errorf(d.at(path), path, "%v", err)
			continue
		}
		if j, dup := prefixes[r.Prefix]; dup {
			d.errorf(d.at(path+".prefix"), path+".prefix", "%q is already the prefix of store.retention[%d]; merge the two rules", r.Prefix, j)
		}
		prefixes[r.Prefix] = i
	}
	if len(s.Retention) > 0 && s.Backend == BackendRemote && !d.failed["store.retention"] {
		d.errorf(d.at("store.retention"), "store.retention", "a remote store's retention is set on the node that serves it (store.serve: true)")
	}
}

// checkTombstoneTTL reports a job in the file whose outputs a retention
// rule may delete and whose fence token is good for longer than
// store.tombstone_ttl: its deleted keys' tombstones could go while it may
// still write, and the prefix's floor would then refuse it (see
// fencedstore.Retention).
func (d *decoder) checkTombstoneTTL(s Store, entries []jobEntry, specs []jobs.Spec) {
	if len(s.Retention) == 0 || s.TombstoneTTL <= 0 {
		return
	}
	for i, spec := range specs {
		if i >= len(entries) || spec.Output == "" {
			continue
		}
		literal, _, _ := strings.Cut(spec.Output, "{{")
		covered := false
		for _, r := range s.Retention {
			covered = covered || strings.HasPrefix(literal, r.Prefix) || strings.HasPrefix(r.Prefix, literal)
		}
		valid := spec.TokenExpiry(time.Time{}).Sub(time.Time{})
		if !covered || valid <= s.TombstoneTTL.D() {
			continue
		}
		path := entries[i].path + ".timeout"
		if d.failed[path] {
			continue
		}
		d.errorf(d.at(path), path, "%s: with lease_ttl its fence token is good for %s, longer than store.tombstone_ttl (%s), and retention may delete its outputs: raise store.tombstone_ttl", spec.Timeout, valid, s.TombstoneTTL)
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

// The api section.

func (d *decoder) checkAPI(a *API, c *Cluster) {
	if a.Token != "" && !d.failed["api.token"] {
		switch err := CheckSecret(a.Token); {
		case err != nil:
			d.errorf(d.at("api.token"), "api.token", "%v (or no token: then only clients on this host may change things)", err)
		case a.Token == c.Secret || a.Token == c.PreviousSecret:
			d.errorf(d.at("api.token"), "api.token", "the same as cluster.secret (or previous_secret): use another value; the token is typed into browsers and scripts, the secret keys the whole cluster")
		}
	}
	d.checkTLS("api.tls", &a.TLS, false)
	for i, h := range a.AllowedHosts {
		p := fmt.Sprintf("api.allowed_hosts[%d]", i)
		if err := checkAllowedHost(h); err != nil && !d.failed[p] {
			d.errorf(d.at(p), p, "%v", err)
		}
	}
	if l := a.Limits; l.MaxHeaderBytes < 0 || l.MaxHeaderBytes > 1<<30 {
		d.errorf(d.at("api.limits.max_header_bytes"), "api.limits.max_header_bytes", "%d: want 0 (the default) to 1GiB", l.MaxHeaderBytes)
	}
	// Every other limit: zero takes the web server's default, and none
	// may be negative.
	lv := reflect.ValueOf(a.Limits)
	for _, f := range fieldsOf(lv.Type()) {
		p := "api.limits." + f.name
		if v := lv.FieldByIndex(f.index); v.Int() < 0 && !d.failed[p] {
			d.errorf(d.at(p), p, "%v: must not be negative (leave it out for the default)", v.Interface())
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
	if !hostNameRE().MatchString(host) {
		return fmt.Errorf("%q: want a host name such as cron.example.com, or host:port (no scheme, path or wildcard)", clip(s, 60))
	}
	return nil
}

var hostNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})\.?$`) })

// The jobs section.

// checkJobs validates the decoded jobs with jobs.Spec.Validate, the one
// validation the leader applies too, and checks that names are unique. It
// returns them normalized.
func (d *decoder) checkJobs(entries []jobEntry, l jobs.Limits) []jobs.Spec {
	var out []jobs.Spec
	if len(entries) > 0 {
		// Copied on every core: 100,000 specs are some 40 MB of memory
		// touched for the first time.
		out = make([]jobs.Spec, len(entries))
		jobs.InParallel(len(entries), func(_, a, b int) {
			for i := a; i < b; i++ {
				out[i] = entries[i].Spec
			}
		})
	}
	// Validate is most of a job's check: it runs on every core, and the
	// problems are reported in the file's order.
	invalid := jobs.ValidateEach(out, l, nil)
	names := make(map[string]int, len(entries))
	d.jobPos = slices.Grow(d.jobPos, len(entries))
	// Fields whose decoding failed are reported already: their sections,
	// by job path ("jobs[3]"), found in one pass rather than one per job,
	// which a large file with a problem in every job made quadratic.
	failedIn := map[string]map[string]bool{}
	for p := range d.failed {
		if i := strings.Index(p, "]."); i >= 0 {
			job := p[:i+1]
			if failedIn[job] == nil {
				failedIn[job] = map[string]bool{}
			}
			failedIn[job][section(p[i+2:])] = true
		}
	}
	for i, e := range entries {
		failed := failedIn[e.path]
		spec := &out[i]
		// Names are unique within a namespace.
		q := spec.QualifiedName()
		if line, dup := names[q]; dup && spec.Name != "" {
			in := ""
			if ns := spec.NamespaceName(); ns != jobs.DefaultNamespace {
				in = " in namespace " + ns
			}
			d.errorf(d.at(e.path+".name"), e.path+".name", "%q is already the name of the job on line %d%s", spec.Name, line, in)
		} else {
			names[q] = e.line
		}
		d.checkJob(invalid[i], e.path, failed)
		if h := spec.HTTP; h != nil && h.CAFile != "" && !failed["http"] {
			if err := checkCAFile(h.CAFile); err != nil {
				d.errorf(d.at(e.path+".http.ca_file"), e.path+".http.ca_file", "%v", err)
			}
		}
		spec.Normalize()
		d.jobPos = append(d.jobPos, e.namePos)
	}
	return out
}

// checkJob reports each problem jobs.Spec.Validate found (invalid) at
// the field it concerns.
func (d *decoder) checkJob(invalid error, path string, failed map[string]bool) {
	var se *jobs.SpecError
	if !errors.As(invalid, &se) {
		return
	}
	one := d.has(path + ".schedule")
	for _, p := range se.Problems {
		field, _, _ := strings.Cut(p.Field, ".")
		if failed[field] || (field == "schedules" && failed["schedule"]) {
			continue
		}
		fpath := path + "." + p.Field
		switch {
		case p.Field == "":
			fpath = path
		case one && p.Field == "schedules":
			fpath = path + ".schedule"
		case p.Index >= 0:
			fpath = indexPath(fpath, p.Index)
		}
		d.errorf(d.jobFieldNode(path, one, p), fpath, "%s", p.Msg)
	}
}

// jobFieldNode finds the node a jobs.FieldError is about.
func (d *decoder) jobFieldNode(path string, one bool, p jobs.FieldError) *yaml.Node {
	switch {
	case (p.Field == "schedules" || p.Field == "schedule") && one:
		return d.at(path + ".schedule")
	case p.Field == "schedule":
		return d.at(path + ".schedules")
	case p.Key != "":
		return d.keyAt(path + "." + p.Field + "." + p.Key)
	case p.Index >= 0:
		return d.at(fmt.Sprintf("%s.%s[%d]", path, p.Field, p.Index))
	}
	return d.at(path + "." + p.Field)
}

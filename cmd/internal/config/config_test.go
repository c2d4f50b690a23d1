package config

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/deploy/examples"
	"github.com/fencecron/fencecron/election"
	"github.com/fencecron/fencecron/jobs"
)

var testEnv = map[string]string{
	"FENCECRON_SECRET":    "fencecron-test-secret-0123456789abcdef",
	"PGPASSWORD":          "s3cret",
	"EMPTY":               "",
	"FENCECRON_API_TOKEN": "fencecron-test-api-token-9876543210",
}

func lookup(k string) (string, bool) { v, ok := testEnv[k]; return v, ok }
func hostname() (string, error)      { return "host-1", nil }

// MustParse parses src or fails the test.
func MustParse(tb testing.TB, src string) *File {
	tb.Helper()
	f, err := parse("test.yaml", []byte(src), lookup, hostname)
	if err != nil {
		tb.Fatalf("parse: %v", err)
	}
	return f
}

// problems parses src and returns its problems as strings.
func problems(tb testing.TB, src string) []string {
	tb.Helper()
	_, err := parse("test.yaml", []byte(src), lookup, hostname)
	if err == nil {
		return nil
	}
	var e *Error
	if !errors.As(err, &e) {
		tb.Fatalf("error %T %v is not *Error", err, err)
	}
	if !errors.Is(err, jobs.ErrInvalidConfig) {
		tb.Error("*Error does not wrap jobs.ErrInvalidConfig")
	}
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return out
}

const fullFile = `
node:
  name: n1
  data_dir: /var/lib/fencecron
  server: true
  bind: 127.0.0.1
  ports: {http: 8081, gossip: 7956, raft: 7957}
  join: ["127.0.0.1:7966", "127.0.0.1:7976"]
  bootstrap_expect: 3
  tags: {zone: a}
  job_nice: 5
cluster:
  secret: ${FENCECRON_SECRET}
  profile: fast
store:
  backend: postgres
  url: postgres://fencecron:${PGPASSWORD}@db:5432/fencecron
  serve: true
  max_body_bytes: 32MiB
  history_retention: 50
  quota: {keys: 500, bytes: 64MiB}
jobs:
  - name: monthly-report
    schedule: "0 0 9 1 * *"
    timezone: Europe/Berlin
    command: ["/usr/local/bin/build-report", "--month", "previous"]
    output: 'reports/{{ .Scheduled.Format "2006-01" }}.csv'
    timeout: 10m
    lease_ttl: 30s
    retries: 3
    backoff: 10s
    overlap: forbid
    misfire: latest
    catchup_window: 1h
    target: {zone: a}
  - name: cleanup
    schedules: ["30 2 * * *", "@every 6h"]
    shell: rm -rf "${TMPDIR:-/tmp}/fencecron-scratch"
    env: {LEVEL: "3", DEBUG: true}
    dir: /srv
    max_output_bytes: 1KiB
    paused: true
    jitter: 90s
    dst: {spring: skip, fall: twice}
`

func TestParse_FullFile(t *testing.T) {
	f := MustParse(t, fullFile)
	wantNode := Node{
		Name: "n1", DataDir: "/var/lib/fencecron", Server: true, RunJobs: true, Bind: "127.0.0.1", Advertise: "127.0.0.1",
		Ports: Ports{HTTP: 8081, Gossip: 7956, Raft: 7957},
		Join:  []string{"127.0.0.1:7966", "127.0.0.1:7976"}, BootstrapExpect: 3,
		Tags: map[string]string{"zone": "a"}, JobNice: 5, MaxAttempts: election.DefaultMaxAttempts,
	}
	if !reflect.DeepEqual(f.Node, wantNode) {
		t.Errorf("node = %+v\nwant  %+v", f.Node, wantNode)
	}
	if got, want := f.Cluster, (Cluster{Secret: "fencecron-test-secret-0123456789abcdef", Profile: "fast", ReapAfter: DefaultReapAfter, History: jobs.DefaultHistory, MaxClockSkew: DefaultMaxClockSkew}); got != want {
		t.Errorf("cluster = %+v, want %+v", got, want)
	}
	wantStore := Store{Backend: "postgres", URL: "postgres://fencecron:s3cret@db:5432/fencecron", Path: "store.db", Serve: true, MaxBodyBytes: 32 << 20, HistoryRetention: 50,
		Quota: Quota{Keys: 500, Bytes: 64 << 20}, KeepVersions: DefaultKeepVersions, TombstoneTTL: jobs.Duration(DefaultTombstoneTTL)}
	if !reflect.DeepEqual(f.Store, wantStore) {
		t.Errorf("store = %+v, want %+v", f.Store, wantStore)
	}
	if got, want := f.EnvUsed(), []string{"FENCECRON_SECRET", "PGPASSWORD"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EnvUsed = %v, want %v", got, want)
	}
	for _, s := range []string{SectionNode, SectionCluster, SectionStore, SectionJobs} {
		if !f.Has(s) {
			t.Errorf("Has(%q) = false", s)
		}
	}

	specs, err := f.Specs()
	if err != nil || len(specs) != 2 {
		t.Fatalf("Specs() = %d specs, %v", len(specs), err)
	}
	report := specs[0]
	if got, want := report.Schedules, []string{"0 0 9 1 * *"}; !reflect.DeepEqual(got, want) {
		t.Errorf("schedules = %q, want %q", got, want)
	}
	if report.Timeout.D() != 10*time.Minute || report.LeaseTTL.D() != 30*time.Second || report.Retries != 3 ||
		report.Backoff.D() != 10*time.Second || report.CatchupWindow.D() != time.Hour || report.Target["zone"] != "a" {
		t.Errorf("report durations or target wrong: %+v", report)
	}
	if got, want := report.DST, (jobs.DSTPolicy{Spring: "shift", Fall: "once"}); got != want {
		t.Errorf("default dst = %+v, want %+v", got, want)
	}
	cleanup := specs[1]
	// The jobs section is literal: ${...} reaches the shell untouched.
	if got, want := cleanup.Shell, `rm -rf "${TMPDIR:-/tmp}/fencecron-scratch"`; got != want {
		t.Errorf("shell = %q, want %q", got, want)
	}
	if got, want := cleanup.Env, map[string]string{"LEVEL": "3", "DEBUG": "true"}; !reflect.DeepEqual(got, want) {
		t.Errorf("env = %v, want %v", got, want)
	}
	if !cleanup.Paused || cleanup.Jitter.D() != 90*time.Second || cleanup.MaxOutputBytes != 1024 || cleanup.Dir != "/srv" {
		t.Errorf("cleanup fields wrong: %+v", cleanup)
	}
	if got, want := cleanup.DST, (jobs.DSTPolicy{Spring: "skip", Fall: "twice"}); got != want {
		t.Errorf("dst = %+v, want %+v", got, want)
	}
	// Normalized: defaults filled in.
	if cleanup.Timeout.D() != jobs.DefaultTimeout || cleanup.Overlap != jobs.OverlapForbid || cleanup.Misfire != jobs.MisfireLatest {
		t.Errorf("cleanup defaults not applied: %+v", cleanup)
	}
}

func TestParse_Defaults(t *testing.T) {
	f := MustParse(t, "node: {bootstrap_expect: 1}\ncluster: {secret: correct-horse-battery-staple-0123456789}\n")
	want := Node{Name: "host-1", DataDir: DefaultDataDir, Server: true, RunJobs: true, Bind: "127.0.0.1", Advertise: "127.0.0.1",
		Ports: Ports{HTTP: 8080, Gossip: 7946, Raft: 7947}, BootstrapExpect: 1, JobNice: DefaultJobNice, MaxAttempts: election.DefaultMaxAttempts}
	if !reflect.DeepEqual(f.Node, want) {
		t.Errorf("node = %+v\nwant  %+v", f.Node, want)
	}
	if f.Cluster.Profile != "default" {
		t.Errorf("profile = %q", f.Cluster.Profile)
	}
	if want := (Store{Backend: "bolt", Path: "store.db", MaxBodyBytes: 16 << 20, HistoryRetention: 1000, Quota: Quota{Keys: 10000, Bytes: 1 << 30},
		KeepVersions: 3, TombstoneTTL: jobs.Duration(7 * 24 * time.Hour)}); !reflect.DeepEqual(f.Store, want) {
		t.Errorf("store = %+v, want %+v", f.Store, want)
	}
	if got, want := f.StorePath(), "/var/lib/fencecron/store.db"; got != want {
		t.Errorf("StorePath = %q, want %q", got, want)
	}
	if f.Has(SectionJobs) || len(f.Jobs) != 0 {
		t.Errorf("jobs present in a file without them")
	}
}

// The api section: a token from the environment (kept from jobs like
// every ${} secret) and the read-only switch; both off by default.
func TestParse_API(t *testing.T) {
	f := MustParse(t, "api: {token: '${FENCECRON_API_TOKEN}', read_only: true}\n")
	if got, want := f.API, (API{Token: "fencecron-test-api-token-9876543210", ReadOnly: true}); !reflect.DeepEqual(got, want) {
		t.Errorf("api = %+v, want %+v", got, want)
	}
	if !f.Has(SectionAPI) {
		t.Error("Has(api) = false")
	}
	if got, want := f.EnvUsed(), []string{"FENCECRON_API_TOKEN"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EnvUsed = %v, want %v", got, want)
	}
	if f := MustParse(t, "jobs: []\n"); !reflect.DeepEqual(f.API, API{}) {
		t.Errorf("default api = %+v, want no token and not read-only", f.API)
	}
}

func TestParse_EmptyAndJobsOnly(t *testing.T) {
	for _, src := range []string{"", "\n# only a comment\n", "---\n", "jobs: []\n", "jobs:\n"} {
		f := MustParse(t, src)
		if len(f.Jobs) != 0 || f.Has(SectionNode) {
			t.Errorf("%q: %d jobs, node %v", src, len(f.Jobs), f.Has(SectionNode))
		}
	}
}

// The dev config is parsed by `fencecron dev`; it has only jobs.
func TestParse_DevExample(t *testing.T) {
	f, err := Parse("deploy/examples/dev.yaml", examples.Dev)
	if err != nil {
		t.Fatal(err)
	}
	specs, _ := f.Specs()
	if len(specs) != 2 || specs[0].Name != "report" || specs[1].Name != "heartbeat" {
		t.Fatalf("specs = %+v", specs)
	}
	if f.Has(SectionNode) {
		t.Error("dev.yaml has no node section")
	}
}

// The reference file documents every field; it must parse with its
// secret set, and every value it shows must be the default it claims.
func TestLoad_ReferenceExample(t *testing.T) {
	t.Setenv("FENCECRON_SECRET", "a-secret-of-at-least-32-bytes-0123456789")
	f, err := Load(filepath.Join("..", "..", "..", "deploy", "examples", "fencecron.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Jobs) < 2 {
		t.Fatalf("reference has %d jobs", len(f.Jobs))
	}
	// Where the reference says "Default: X" and shows X, X must be the
	// default.
	if got, want := f.Node.Ports, (Ports{DefaultHTTPPort, DefaultGossipPort, DefaultRaftPort}); got != want {
		t.Errorf("ports = %+v, want the defaults %+v", got, want)
	}
	if f.Node.DataDir != DefaultDataDir || f.Node.Bind != DefaultBind || !f.Node.Server || f.Cluster.Profile != DefaultProfile {
		t.Errorf("node or cluster shows values other than the defaults: %+v %+v", f.Node, f.Cluster)
	}
	wantStore := Store{Backend: DefaultBackend, Path: DefaultStorePath, Serve: true, MaxBodyBytes: DefaultMaxBodyBytes, HistoryRetention: DefaultHistoryRetention,
		Quota: Quota{Keys: DefaultQuotaKeys, Bytes: DefaultQuotaBytes}, KeepVersions: DefaultKeepVersions, TombstoneTTL: jobs.Duration(DefaultTombstoneTTL)}
	if !reflect.DeepEqual(f.Store, wantStore) {
		t.Errorf("store = %+v, want %+v", f.Store, wantStore)
	}
	j := f.Jobs[0]
	def := jobs.Spec{}
	def.Normalize()
	if j.Timeout != def.Timeout || j.LeaseTTL != def.LeaseTTL || j.Backoff != def.Backoff || j.Overlap != def.Overlap ||
		j.Misfire != def.Misfire || j.CatchupWindow != def.CatchupWindow || j.MaxOutputBytes != def.MaxOutputBytes ||
		j.DST != def.DST || j.Paused || j.Jitter != 0 {
		t.Errorf("the full job shows values other than the defaults:\n%+v\ndefaults:\n%+v", j, def)
	}
	// api.limits shows the web server's defaults; cmd/fencecron checks
	// those against web.DefaultLimits.
	if f.API.Token != "" || f.API.ReadOnly || len(f.API.AllowedHosts) != 0 {
		t.Errorf("api = %+v, want the defaults: no token, not read-only, no allowed hosts", f.API)
	}
	if len(f.Warnings) != 0 {
		t.Errorf("the reference takes its secret from the environment, yet warns: %v", f.Warnings)
	}
	for _, s := range []string{SectionNode, SectionCluster, SectionStore, SectionAPI, SectionJobs} {
		if !f.Has(s) {
			t.Errorf("reference lacks section %s", s)
		}
	}
}

func TestLoad_Errors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxFileSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

// Every problem, with its position, all reported together.
func TestParse_History(t *testing.T) {
	const head = "node: {bootstrap_expect: 1}\ncluster:\n  secret: correct-horse-battery-staple-0123456789\n"
	f := MustParse(t, head+"  history: {runs: 7}\njobs:\n  - {name: a, schedule: '@daily', shell: 'true', history: {max_age: 2d}}\n")
	if got, want := f.Cluster.History, (jobs.History{Runs: 7, MaxAge: jobs.DefaultHistory.MaxAge}); got != want {
		t.Errorf("cluster.history = %+v, want %+v (max_age left at its default)", got, want)
	}
	if got, want := f.Jobs[0].History, (jobs.History{MaxAge: jobs.Duration(48 * time.Hour)}); got != want {
		t.Errorf("job history = %+v, want %+v (runs left to the cluster's)", got, want)
	}
	if got, want := f.Jobs[0].History.Resolve(f.Cluster.History), (jobs.History{Runs: 7, MaxAge: jobs.Duration(48 * time.Hour)}); got != want {
		t.Errorf("resolved = %+v, want %+v", got, want)
	}
	got := problems(t, head+"  history: {runs: 0, max_age: -1h}\njobs:\n  - name: a\n    schedule: '@daily'\n    shell: 'true'\n    history: {runs: 100001, max_age: -48h}\n  - {name: b, schedule: '@daily', shell: 'true', history: {keep: 1}}\n")
	want := []string{
		"test.yaml:4:19: cluster.history.runs: 0: want 1 to 100000",
		"test.yaml:4:31: cluster.history.max_age: -1h0m0s: want a positive duration such as 30d",
		"test.yaml:9:21: jobs[0].history.runs: 100001: want 1 to 100000",
		"test.yaml:9:38: jobs[0].history.max_age: -48h0m0s: want a positive duration such as 30d",
		`test.yaml:10:60: jobs[1].history: unknown field "keep"; expected one of runs, max_age`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParse_Problems(t *testing.T) {
	const node = "node: {bootstrap_expect: 1}\ncluster: {secret: correct-horse-battery-staple-0123456789}\n"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"syntax", "jobs:\n  - name: a\n   schedule: x\n", []string{"test.yaml:3: YAML syntax: did not find expected '-' indicator"}},
		{"syntax tab", "node:\n  name: a\n\tbind: x\n", []string{"test.yaml:3: YAML syntax: found a tab character"}},
		{"syntax unclosed flow", "node: {name: a}\njobs: [a, b\n", []string{"test.yaml:2: YAML syntax: did not find expected ',' or ']'"}},
		{"syntax key", "node:\n  name: a\n bind: x\n", []string{"test.yaml:3: YAML syntax: did not find expected key"}},
		{"two documents", "jobs: []\n---\njobs: []\n", []string{"test.yaml:2:1: a second YAML document"}},
		{"top level list", "- a\n", []string{"test.yaml:1:1: expected a mapping with sections node, cluster, store, api, jobs; got a list"}},
		{"unknown section", "job: []\n", []string{`test.yaml:1:1: unknown field "job" (did you mean "jobs"?)`}},
		{"unknown section far", "logging: {}\n", []string{`test.yaml:1:1: unknown field "logging"; expected one of node, cluster, store, api, notify, jobs`}},
		{"api token too short", "api: {token: abc}\n", []string{"test.yaml:1:14: api.token: 3 bytes: want at least 32"}},
		{"api unknown field", "api: {tokn: abc}\n", []string{`test.yaml:1:7: api: unknown field "tokn" (did you mean "token"?)`}},
		{"api read_only not a bool", "api: {read_only: sometimes}\n", []string{`test.yaml:1:18: api.read_only: expected true or false, got "sometimes"`}},
		{"duplicate section", "jobs: []\njobs: []\n", []string{"test.yaml:2:1: jobs: duplicate field (first on line 1)"}},
		{"alias", "node: &n {name: a, bootstrap_expect: 1}\ncluster: *n\n", []string{"test.yaml:2:10: cluster: aliases (*n) are not supported"}},
		{"node not a mapping", "node: n1\ncluster: {secret: correct-horse-battery-staple-0123456789}\n", []string{`test.yaml:1:7: node: expected a mapping of name, data_dir, server, run_jobs, bind, advertise, ports, join, bootstrap_expect, tags, jobs_dir, job_nice, max_attempts, got "n1"`}},
		{"missing env", "node: {bootstrap_expect: 1, name: '${NODE_NAME}'}\ncluster: {secret: '${FENCECRON_SECRET}'}\n", []string{
			"test.yaml:1:35: node.name: environment variable NODE_NAME is not set"}},
		{"bad env reference", "cluster: {secret: '${FENCECRON SECRET}'}\n", []string{
			`test.yaml:1:19: cluster.secret: bad variable reference at "${FENCECRON SECRET}"`}},
		{"empty env makes the secret missing", "node: {bootstrap_expect: 1}\ncluster: {secret: '${EMPTY}'}\n", []string{
			"test.yaml:2:19: cluster.secret: required for a node"}},
		{"node problems", `node:
  name: "bad name"
  bind: 0.0.0.0
  server: maybe
  ports: {http: 70000, gossip: 7946, raft: 7946}
  join: ["10.0.0.2:7946", "a_b:7946", ":7946"]
  bootstrap_expect: -1
  tagz: {zone: a}
cluster:
  secret: short
  profile: quick
`, []string{
			`test.yaml:2:9: node.name: "bad name": want 1-128 letters`,
			"test.yaml:3:9: node.advertise: required when bind is 0.0.0.0",
			`test.yaml:4:11: node.server: expected true or false, got "maybe"`,
			"test.yaml:5:10: node.ports: http 8080, gossip 7946 and raft 7946 must differ",
			"test.yaml:5:17: node.ports.http: port 70000: want 1 to 65535",
			`test.yaml:6:27: node.join[1]: "a_b:7946": host "a_b": want a host name or an IP address`,
			`test.yaml:6:39: node.join[2]: ":7946": the host is missing`,
			"test.yaml:7:21: node.bootstrap_expect: -1: must not be negative",
			`test.yaml:8:3: node: unknown field "tagz" (did you mean "tags"?)`,
			"test.yaml:10:11: cluster.secret: 5 bytes: want at least 32",
			`test.yaml:11:12: cluster.profile: "quick": want default or fast`,
		}},
		{"clock skew threshold", "node: {bootstrap_expect: 1}\ncluster: {secret: correct-horse-battery-staple-0123456789, max_clock_skew: -1s}\n", []string{
			"test.yaml:2:76: cluster.max_clock_skew: -1s: want a duration above zero, such as 500ms"}},
		{"job priority out of range", "node: {bootstrap_expect: 1, job_nice: 20}\ncluster: {secret: correct-horse-battery-staple-0123456789}\n", []string{
			"test.yaml:1:39: node.job_nice: 20: must be 0 (the node's own priority) to 19 (the lowest)"}},
		{"a worker does not bootstrap", "node: {server: false, bootstrap_expect: 1, join: ['a:1']}\ncluster: {secret: correct-horse-battery-staple-0123456789}\n", []string{
			"test.yaml:1:41: node.bootstrap_expect: only a server bootstraps"}},
		{"a lone server must bootstrap", "node: {name: n1}\ncluster: {secret: correct-horse-battery-staple-0123456789}\n", []string{
			"test.yaml:1:7: node.bootstrap_expect: a server with no join addresses must bootstrap"}},
		{"node without cluster", "node: {bootstrap_expect: 1}\n", []string{"test.yaml:1:1: cluster.secret: required for a node"}},
		{"store problems", "store:\n  backend: s3\n  max_body_bytes: lots\n  history_retention: -1\n", []string{
			`test.yaml:2:12: store.backend: "s3": want bolt, postgres or remote`,
			`test.yaml:3:19: store.max_body_bytes: expected a size in bytes such as 1048576 or 16MiB, got "lots"`,
			"test.yaml:4:22: store.history_retention: -1: must be positive"}},
		{"store quota problems", "store:\n  quota: {keys: -1, bytes: lots, files: 3}\n", []string{
			"test.yaml:2:17: store.quota.keys: -1: must be positive",
			`test.yaml:2:28: store.quota.bytes: expected a size in bytes such as 1048576 or 16MiB, got "lots"`,
			`test.yaml:2:34: store.quota: unknown field "files"`}},
		{"store quota not a mapping", "store:\n  quota: 5\n", []string{
			"test.yaml:2:10: store.quota: expected a mapping of"}},
		{"postgres needs a url", "store: {backend: postgres}\n", []string{"test.yaml:1:8: store.url: required for backend postgres"}},
		{"postgres url scheme", "store: {backend: postgres, url: 'mysql://db'}\n", []string{"test.yaml:1:33: store.url: want a postgres:// or postgresql:// URL"}},
		{"remote store", "store: {backend: remote, url: 'db:8080', serve: true}\n", []string{
			`test.yaml:1:31: store.url: "db:8080": want http://host:port`,
			"test.yaml:1:49: store.serve: a node whose store is remote cannot serve it"}},
		{"bolt with url", "store: {url: 'http://x'}\n", []string{"test.yaml:1:14: store.url: only for backend postgres or remote"}},
		{"jobs not a list", "jobs: {name: a}\n", []string{"test.yaml:1:7: jobs: expected a list of jobs, got a mapping"}},
		{"job not a mapping", "jobs: [report]\n", []string{`test.yaml:1:8: jobs[0]: expected a job (a mapping with name, schedule, command, ...), got "report"`}},
		{"job problems", `jobs:
  - name: Report_1
    schedule: "0 0 9 1 * * *"
    timezone: Europe/Berlinn
    command: "/bin/echo hi"
    timeout: 10
    lease_ttl: 10ms
    retries: three
    overlap: queue
    misfire: never
    dst: {spring: jump, fall: thrice}
    env: {OK: 1, FENCECRON_TOKEN: forged, 2BAD: x}
    dir: relative/dir
    output: '/reports/{{ .Job }}'
    target: {"": a}
    paused: sometimes
    jitter: -1s
    max_output_bytes: 1GiB
    timout: 5m
`, []string{
			`test.yaml:2:11: jobs[0].name: "Report_1" is not a DNS label`,
			`test.yaml:3:15: jobs[0].schedule: "0 0 9 1 * * *": want 5 fields`,
			`test.yaml:4:15: jobs[0].timezone: unknown time zone "Europe/Berlinn"`,
			`test.yaml:5:14: jobs[0].command: expected a list of strings such as ["/usr/bin/report", "--month", "previous"]; for a command line use shell:, got "/bin/echo hi"`,
			`test.yaml:6:14: jobs[0].timeout: expected a duration such as 90s, 10m or 30d, got "10" (a unit is required)`,
			"test.yaml:7:16: jobs[0].lease_ttl: 10ms: want at least 1s",
			`test.yaml:8:14: jobs[0].retries: expected an integer, got "three"`,
			`test.yaml:9:14: jobs[0].overlap: "queue": want forbid, allow or replace`,
			`test.yaml:10:14: jobs[0].misfire: "never": want skip, latest or all`,
			`test.yaml:11:19: jobs[0].dst.spring: "jump": want shift or skip`,
			`test.yaml:11:31: jobs[0].dst.fall: "thrice": want once or twice`,
			`test.yaml:12:18: jobs[0].env: "FENCECRON_TOKEN": names starting with FENCECRON_ are reserved`,
			`test.yaml:12:43: jobs[0].env: "2BAD" is not a variable name`,
			`test.yaml:13:10: jobs[0].dir: "relative/dir": want an absolute path`,
			`test.yaml:14:13: jobs[0].output: renders "/reports/Report_1", not a valid store key`,
			"test.yaml:15:13: jobs[0].target: empty tag name",
			`test.yaml:16:13: jobs[0].paused: expected true or false, got "sometimes"`,
			"test.yaml:17:13: jobs[0].jitter: -1s: must not be negative",
			"test.yaml:18:23: jobs[0].max_output_bytes: 1073741824 is more than store.max_body_bytes (16777216)",
			`test.yaml:19:5: jobs[0]: unknown field "timout" (did you mean "timeout"?)`,
		}},
		{"missing required job fields", "jobs:\n  - timezone: UTC\n", []string{
			"test.yaml:2:5: jobs[0].name: required",
			"test.yaml:2:5: jobs[0].schedule: required",
			"test.yaml:2:5: jobs[0].command: required"}},
		{"schedule and schedules", "jobs:\n  - {name: a, schedule: '@daily', schedules: ['@hourly'], shell: 'true'}\n", []string{
			"test.yaml:2:46: jobs[0].schedules: give schedule or schedules, not both"}},
		{"second schedule bad", "jobs:\n  - name: a\n    schedules: ['@daily', '@every 1.5s', '0 0 30 2 *']\n    shell: 'true'\n", []string{
			`test.yaml:3:27: jobs[0].schedules[1]: "@every 1.5s": @every interval must be a whole number of seconds`,
			`test.yaml:3:42: jobs[0].schedules[2]: "0 0 30 2 *": never fires`}},
		{"command and shell", "jobs:\n  - {name: a, schedule: '@daily', command: [x], shell: 'true'}\n", []string{
			"test.yaml:2:56: jobs[0].shell: give command or shell, not both"}},
		{"empty program", "jobs:\n  - {name: a, schedule: '@daily', command: ['', x]}\n", []string{
			"test.yaml:2:45: jobs[0].command[0]: the program is empty"}},
		{"duplicate names", "jobs:\n  - {name: a, schedule: '@daily', shell: x}\n  - {name: a, schedule: '@daily', shell: y}\n", []string{
			`test.yaml:3:12: jobs[1].name: "a" is already the name of the job on line 2`}},
		{"duplicate env key", "jobs:\n  - {name: a, schedule: '@daily', shell: x, env: {A: 1, A: 2}}\n", []string{
			"test.yaml:2:57: jobs[0].env.A: duplicate key (first on line 2)"}},
		{"jitter too long", "jobs:\n  - {name: a, schedule: '@every 1m', shell: x, jitter: 2m}\n", []string{
			"test.yaml:2:56: jobs[0].jitter: 2m0s: want less than the shortest interval between fire times (1m0s)"}},
		{"output template", "jobs:\n  - {name: a, schedule: '@daily', shell: x, output: '{{ .Nope }}'}\n", []string{
			"test.yaml:2:53: jobs[0].output: output template: "}},
		{"problems in several sections at once", node + "store: {backend: x}\njobs:\n  - {name: A, schedule: '@daily', shell: x}\n", []string{
			`test.yaml:3:18: store.backend: "x": want bolt, postgres or remote`,
			`test.yaml:5:12: jobs[0].name: "A" is not a DNS label`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problems(t, tt.src)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("problem %d:\n got %s\nwant %s...", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestFile_JobsHash(t *testing.T) {
	a := MustParse(t, "jobs:\n  - {name: a, schedule: '@daily', shell: x}\n  - {name: b, schedules: ['@hourly'], command: [/bin/true], timeout: 10m}\n")
	b := MustParse(t, "jobs:\n  - {name: b, schedule: '@hourly', command: [/bin/true]}\n  - {name: a, schedules: ['@daily'], shell: x, dst: {spring: shift}}\n")
	if a.JobsHash() != b.JobsHash() {
		t.Errorf("equivalent job sets hash differently: %s vs %s", a.JobsHash(), b.JobsHash())
	}
	c := MustParse(t, "jobs:\n  - {name: a, schedule: '@daily', shell: x, paused: true}\n  - {name: b, schedule: '@hourly', command: [/bin/true]}\n")
	if a.JobsHash() == c.JobsHash() {
		t.Error("pausing a job did not change the hash")
	}
}

func TestExpandEnv(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{"plain", "plain", ""},
		{"$HOME and $ alone", "$HOME and $ alone", ""},
		{"${FENCECRON_SECRET}", "fencecron-test-secret-0123456789abcdef", ""},
		{"a${EMPTY}b", "ab", ""},
		{"$${FENCECRON_SECRET}", "${FENCECRON_SECRET}", ""},
		{"x${PGPASSWORD}y${PGPASSWORD}", "xs3crety" + "s3cret", ""},
		{"${UNSET}", "", "environment variable UNSET is not set"},
		{"${", "", "bad variable reference"},
		{"${1A}", "", "bad variable reference"},
		{"${A-b}", "", "bad variable reference"},
		{"${UNSET:-80}81", "8081", ""},
		{"${EMPTY:-80}81", "8081", ""},
		{"${FENCECRON_SECRET:-x}", "fencecron-test-secret-0123456789abcdef", ""},
		{"${UNSET:-}", "", ""},
	}
	for _, tt := range tests {
		got, err := expandEnv(tt.in, lookup, nil)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("expandEnv(%q) err = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("expandEnv(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "16MiB": 16 << 20, "1 KiB": 1024, "2GB": 2e9, "1_000": 1000, "5B": 5} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "1.5MiB", "10TiB", "9223372036854775807GiB", "x"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}

// One rule for every secret: long enough, and not a trivial pattern.
func TestCheckSecret(t *testing.T) {
	tests := []struct {
		secret string
		want   string // a fragment of the error; "" for accepted
	}{
		{"", "0 bytes: want at least 32"},
		{"aaaaaaaaaaaaaaaa", "16 bytes: want at least 32"},
		{"0123456789abcdef0123456789abcde", "31 bytes: want at least 32"},
		{strings.Repeat("a", 32), "only 1 distinct bytes"},
		{strings.Repeat("abcdefg", 6), "only 7 distinct bytes"},
		{strings.Repeat("abcdefgh", 4), "a 8-byte pattern repeated"},
		{strings.Repeat("0123456789abcdef", 2), "a 16-byte pattern repeated"},
		{strings.Repeat("0123456789abcdef", 3)[:40], "a 16-byte pattern repeated"},
		{"abcdefghijklmnopqrstuvwxyzABCDEF", "only 2 different steps"},
		{"02468:<>@BDFHJLNPRTVXZ\\^`bdfhjlnp", "only 1 different steps"},
		{"aAbBcCdDeEfFgGhHiIjJkKlLmMnNoOpP", "only 2 different steps"},
		{"0123456789abcdef0123456789abcdefX", "only 4 different steps"},
		// Accepted: random hex (openssl rand -hex 32), base64, a passphrase.
		{"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", ""},
		{"q3Zx8Kp1Lm0Vb7Nc2Rt5Yw9Ue4Io6PaS", ""},
		{"correct-horse-battery-staple-0123456789", ""},
		{"localcluster-" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ", ""},
	}
	for _, tc := range tests {
		err := CheckSecret(tc.secret)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckSecret(%q) = %v, want accepted", tc.secret, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckSecret(%q) = %v, want an error containing %q", tc.secret, err, tc.want)
		case err != nil && len(tc.secret) > 0 && strings.Contains(err.Error(), tc.secret):
			t.Errorf("CheckSecret(%q): the message repeats the secret: %v", tc.secret, err)
		}
	}
}

// The secret rules where the file states them, and an API token that is
// the cluster secret.
func TestParse_SecretProblems(t *testing.T) {
	const sec = "correct-horse-battery-staple-0123456789"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"16 a's", "node: {bootstrap_expect: 1}\ncluster: {secret: aaaaaaaaaaaaaaaa}\n", []string{
			"test.yaml:2:19: cluster.secret: 16 bytes: want at least 32"}},
		{"a repeated pattern", "node: {bootstrap_expect: 1}\ncluster: {secret: abcdefghabcdefghabcdefghabcdefgh}\n", []string{
			"test.yaml:2:19: cluster.secret: a 8-byte pattern repeated"}},
		{"a weak token", "api: {token: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n", []string{
			"test.yaml:1:14: api.token: only 1 distinct bytes"}},
		{"token is the secret", "node: {bootstrap_expect: 1}\ncluster: {secret: " + sec + "}\napi: {token: " + sec + "}\n", []string{
			"test.yaml:3:14: api.token: the same as cluster.secret"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problems(t, tc.src)
			if len(got) != len(tc.want) {
				t.Fatalf("problems = %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// api.allowed_hosts and api.limits: parsed, and bad values refused at
// their position.
func TestParse_APIHostsAndLimits(t *testing.T) {
	f := MustParse(t, `api:
  allowed_hosts: [cron.example.com, "cron.example.com:8443", 10.0.0.5, "[::1]:8080"]
  limits: {read_header_timeout: 5s, read_timeout: 20s, write_timeout: 1m, idle_timeout: 90s, max_header_bytes: 32KiB,
           max_connections: 100, max_event_streams: 10, event_heartbeat: 5s}
`)
	if got, want := f.API.AllowedHosts, []string{"cron.example.com", "cron.example.com:8443", "10.0.0.5", "[::1]:8080"}; !reflect.DeepEqual(got, want) {
		t.Errorf("allowed_hosts = %q, want %q", got, want)
	}
	want := Limits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 20 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 90 * time.Second,
		MaxHeaderBytes: 32 << 10, MaxConnections: 100, MaxEventStreams: 10, EventHeartbeat: 5 * time.Second}
	if f.API.Limits != want {
		t.Errorf("limits = %+v, want %+v", f.API.Limits, want)
	}

	got := problems(t, `api:
  allowed_hosts: ["http://cron.example.com", "*.example.com", "cron:0", "ok.example.com"]
  limits: {read_timeout: -1s, max_connections: -5, idle_timeout: 10, max_header_bytes: 2GiB, burst: 3}
`)
	wantProbs := []string{
		`test.yaml:2:19: api.allowed_hosts[0]: "http://cron.example.com": want a host name`,
		`test.yaml:2:46: api.allowed_hosts[1]: "*.example.com": want a host name`,
		`test.yaml:2:63: api.allowed_hosts[2]: "cron:0": port "0": want 1 to 65535`,
		"test.yaml:3:26: api.limits.read_timeout: -1s: must not be negative",
		"test.yaml:3:48: api.limits.max_connections: -5: must not be negative",
		`test.yaml:3:66: api.limits.idle_timeout: expected a duration such as 90s, 10m or 30d, got "10" (a unit is required)`,
		"test.yaml:3:88: api.limits.max_header_bytes: 2147483648: want 0 (the default) to 1GiB",
		`test.yaml:3:94: api.limits: unknown field "burst"`,
	}
	if len(got) != len(wantProbs) {
		t.Fatalf("problems = %q\nwant %q", got, wantProbs)
	}
	for i := range got {
		if !strings.HasPrefix(got[i], wantProbs[i]) {
			t.Errorf("problem %d = %q, want it to start with %q", i, got[i], wantProbs[i])
		}
	}
}

// A literal secret in a file the group or others may read is a warning
// (the node still starts); from the environment, or mode 0600, it is not.
func TestLoad_LiteralSecretWarning(t *testing.T) {
	const sec = "correct-horse-battery-staple-0123456789"
	t.Setenv("FENCECRON_SECRET", sec)
	literal := "node: {bootstrap_expect: 1}\ncluster:\n  secret: " + sec + "\napi: {token: 'tok-${FENCECRON_SECRET}'}\n"
	fromEnv := "node: {bootstrap_expect: 1}\ncluster:\n  secret: ${FENCECRON_SECRET}\n"
	tests := []struct {
		name string
		src  string
		mode os.FileMode
		want []string
	}{
		{"literal, world-readable", literal, 0o644, []string{
			"cluster.secret: written in a file the group or others may read (mode 0644): chmod 600",
			"api.token: written in a file the group or others may read (mode 0644)"}},
		{"literal, group-readable", literal, 0o640, []string{"cluster.secret: written", "api.token: written"}},
		{"literal, owner only", literal, 0o600, nil},
		{"from the environment, world-readable", fromEnv, 0o644, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node.yaml")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			f, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Warnings) != len(tc.want) {
				t.Fatalf("warnings = %v, want %d", f.Warnings, len(tc.want))
			}
			for i, w := range f.Warnings {
				if !strings.Contains(w.String(), tc.want[i]) {
					t.Errorf("warning %d = %q, want it to contain %q", i, w, tc.want[i])
				}
				if strings.Contains(w.String(), sec) {
					t.Errorf("warning %d repeats the secret: %q", i, w)
				}
			}
		})
	}
	if f := MustParse(t, literal); len(f.Warnings) != 0 {
		t.Errorf("Parse (no file mode) warned: %v", f.Warnings)
	}
}

func TestParse_TLSAndPreviousSecret(t *testing.T) {
	const secret = "correct-horse-battery-staple-0123456789"
	const previous = "an-older-secret-of-the-cluster-9876543210"
	f := MustParse(t, `node: {bootstrap_expect: 1}
cluster:
  secret: `+secret+`
  previous_secret: `+previous+`
  tls: {ca_file: /etc/fc/ca.pem, cert_file: /etc/fc/n1.pem, key_file: /etc/fc/n1.key}
api:
  tls: {cert_file: /etc/fc/web.pem, key_file: /etc/fc/web.key}
`)
	if got, want := f.Cluster.PreviousSecret, previous; got != want {
		t.Errorf("previous_secret = %q", got)
	}
	if got, want := f.Cluster.TLS, (TLSFiles{CAFile: "/etc/fc/ca.pem", CertFile: "/etc/fc/n1.pem", KeyFile: "/etc/fc/n1.key"}); got != want {
		t.Errorf("cluster.tls = %+v, want %+v", got, want)
	}
	if got, want := f.API.TLS, (TLSFiles{CertFile: "/etc/fc/web.pem", KeyFile: "/etc/fc/web.key"}); got != want {
		t.Errorf("api.tls = %+v, want %+v", got, want)
	}

	const node = "node: {bootstrap_expect: 1}\n"
	for _, tt := range []struct {
		name, src, want string
	}{
		{"previous equal to the secret", node + "cluster: {secret: " + secret + ", previous_secret: " + secret + "}\n", "test.yaml:2:77: cluster.previous_secret: the same as cluster.secret"},
		{"weak previous secret", node + "cluster: {secret: " + secret + ", previous_secret: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n", "test.yaml:2:77: cluster.previous_secret: only 1 distinct bytes"},
		{"token equal to the previous secret", node + "cluster: {secret: " + secret + ", previous_secret: " + previous + "}\napi: {token: " + previous + "}\n", "test.yaml:3:14: api.token: the same as cluster.secret (or previous_secret)"},
		{"cluster.tls without its key", node + "cluster: {secret: " + secret + ", tls: {ca_file: a, cert_file: b}}\n", "test.yaml:2:65: cluster.tls: give ca_file, cert_file and key_file together"},
		{"api.tls without its key", "api: {tls: {cert_file: b}}\n", "test.yaml:1:12: api.tls: give cert_file and key_file together"},
		{"api.tls takes no CA", "api: {tls: {ca_file: a, cert_file: b, key_file: c}}\n", `test.yaml:1:13: api.tls: unknown field "ca_file"`},
	} {
		got := problems(t, tt.src)
		if len(got) != 1 || !strings.HasPrefix(got[0], tt.want) {
			t.Errorf("%s: got %q, want one problem starting %q", tt.name, got, tt.want)
		}
	}
}

// A job's output cap is checked against the store's body cap by the same
// validation the leader applies (jobs.Spec.Validate): an explicit value,
// and the default when the job leaves it out of a file whose store takes
// less.
func TestParse_JobsAgainstTheStoreBodyCap(t *testing.T) {
	const job = "jobs:\n  - {name: a, schedule: '@daily', shell: x}\n"
	if f := MustParse(t, "store: {max_body_bytes: 16MiB}\n"+job); f.Jobs[0].MaxOutputBytes != jobs.DefaultMaxOutputBytes {
		t.Errorf("max_output_bytes = %d, want the default", f.Jobs[0].MaxOutputBytes)
	}
	got := problems(t, "store: {max_body_bytes: 1MiB}\n"+job+"  - {name: b, schedule: '@daily', shell: x, max_output_bytes: 2MiB}\n  - {name: c, schedule: '@daily', shell: x, max_output_bytes: 1MiB}\n")
	want := []string{
		"test.yaml:3:5: jobs[0].max_output_bytes: the default, 16777216, is more than store.max_body_bytes (1048576): set max_output_bytes to at most 1048576",
		"test.yaml:4:63: jobs[1].max_output_bytes: 2097152 is more than store.max_body_bytes (1048576)",
	}
	if len(got) != len(want) {
		t.Fatalf("problems = %q\nwant %q", got, want)
	}
	for i := range got {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

// The reference file shows every field of the schema, which is the yaml
// tags of this package's types and of jobs.Spec: written, or (for what
// has no default to show) in a comment. A field added to any of them and
// not documented there fails here.
func TestReferenceExample_ShowsEveryField(t *testing.T) {
	ref, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "examples", "fencecron.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := newDecoder("fencecron.yaml", lookup)
	root, ok := d.document(ref)
	if !ok {
		t.Fatal(d.result())
	}
	doc := defaults(hostname)
	d.decodeRoot(root, &doc)
	if err := d.result(); err != nil {
		t.Fatal(err)
	}
	// Every key written, by its path without list indexes (the decoder
	// records none inside jobs, so walk the tree).
	written := map[string]bool{}
	var keys func(n *yaml.Node, path string)
	keys = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				sub := join(path, n.Content[i].Value)
				written[sub] = true
				keys(n.Content[i+1], sub)
			}
		case yaml.SequenceNode:
			for _, e := range n.Content {
				keys(e, path)
			}
		}
	}
	keys(root, "")
	var comments strings.Builder
	for line := range strings.Lines(string(ref)) {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "#") {
			comments.WriteString(l)
		}
	}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for _, f := range fieldsOf(typ) {
			path := join(prefix, f.name)
			commented := regexp.MustCompile(`[#\s{,]` + regexp.QuoteMeta(f.name) + `: `).MatchString(comments.String())
			if !written[path] && !commented {
				t.Errorf("the reference does not show %s", path)
			}
			ft := typ.FieldByIndex(f.index).Type
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(path, ft)
			}
		}
	}
	walk("", reflect.TypeFor[sections]())
}

// Problems that the generic decoding reports more precisely than a
// field-by-field parser would: the first of two duplicate keys is still
// checked, and after a list element that does not decode the others keep
// their index and position.
func TestParse_ProblemsAroundDuplicatesAndBadElements(t *testing.T) {
	const secret = "cluster: {secret: correct-horse-battery-staple-0123456789}\n"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"duplicate key, bad first value", "node: {name: 'a b', name: n1, bootstrap_expect: 1}\n" + secret, []string{
			`test.yaml:1:14: node.name: "a b": want 1-128 letters`,
			"test.yaml:1:21: node.name: duplicate field (first on line 1)"}},
		{"elements after a bad one", "node: {join: ['10.0.0.1:7946', [x], 'a_b:7946']}\n" + secret, []string{
			"test.yaml:1:32: node.join[1]: expected a string, got a list",
			`test.yaml:1:37: node.join[2]: "a_b:7946": host "a_b": want a host name or an IP address`}},
		{"api.tls takes no CA", "api: {tls: {ca_file: a, cert_file: b, key_file: c}}\n", []string{
			`test.yaml:1:13: api.tls: unknown field "ca_file": only cluster.tls takes CAs`}},
		{"an alias for a job's field", "jobs:\n  - {name: a, schedule: &s '@daily', shell: x}\n  - {name: b, schedule: *s, shell: x}\n", []string{
			"test.yaml:3:25: jobs[1].schedule: aliases (*s) are not supported"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problems(t, tc.src)
			if len(got) != len(tc.want) {
				t.Fatalf("problems = %q\nwant %q", got, tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// store.retention is a list of rules with days allowed in max_age;
// keep_versions and tombstone_ttl have defaults; bad rules are reported
// at their position.
func TestParse_StoreRetention(t *testing.T) {
	f := MustParse(t, `store:
  retention:
    - {prefix: reports/, max_age: 90d, max_keys: 100000}
    - prefix: tmp/
      max_keys: 10
  keep_versions: 5
  tombstone_ttl: 10d
`)
	want := []RetentionRule{{Prefix: "reports/", MaxAge: jobs.Duration(90 * 24 * time.Hour), MaxKeys: 100000}, {Prefix: "tmp/", MaxKeys: 10}}
	if !reflect.DeepEqual(f.Store.Retention, want) || f.Store.KeepVersions != 5 || f.Store.TombstoneTTL.D() != 240*time.Hour {
		t.Errorf("store = %+v", f.Store)
	}

	got := problems(t, `store:
  retention:
    - {prefix: "", max_age: 1d}
    - {prefix: a/, max_age: 1d}
    - {prefix: a/, max_keys: 3}
    - {prefix: b/}
    - {prefix: c/, max_age: soon}
    - {prefix: d/, max_keys: 1, keep: 2}
  keep_versions: 0x7fffffff
`)
	wantProbs := []string{
		`test.yaml:3:7: store.retention[0]: prefix is required`,
		`test.yaml:5:16: store.retention[2].prefix: "a/" is already the prefix of store.retention[1]`,
		`test.yaml:6:7: store.retention[3]: set max_age, max_keys or both`,
		`test.yaml:7:29: store.retention[4].max_age: expected a duration such as 90s, 10m or 30d, got "soon"`,
		`test.yaml:8:33: store.retention[5]: unknown field "keep"`,
		`test.yaml:9:18: store.keep_versions: 2147483647: want 1 (the current body only) to 1000`,
	}
	if len(got) != len(wantProbs) {
		t.Fatalf("problems = %q\nwant %q", got, wantProbs)
	}
	for i := range got {
		if !strings.HasPrefix(got[i], wantProbs[i]) {
			t.Errorf("problem %d = %q, want it to start with %q", i, got[i], wantProbs[i])
		}
	}
}

// A job whose token outlives store.tombstone_ttl, with outputs a rule may
// delete, is reported at its timeout; one outside every rule is not.
func TestParse_JobOutlivesTombstones(t *testing.T) {
	got := problems(t, `store:
  retention: [{prefix: reports/, max_age: 30d}]
  tombstone_ttl: 1d
jobs:
  - {name: long, schedule: "@daily", command: [x], output: "reports/{{ .RunID }}.csv", timeout: 2d}
  - {name: elsewhere, schedule: "@daily", command: [x], output: "logs/{{ .RunID }}.csv", timeout: 2d}
  - {name: short, schedule: "@daily", command: [x], output: "reports/s-{{ .RunID }}.csv", timeout: 1h}
`)
	want := "test.yaml:5:97: jobs[0].timeout: 48h0m0s: with lease_ttl its fence token is good for 48h2m30s, longer than store.tombstone_ttl (24h0m0s)"
	if len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Errorf("problems = %q, want one starting %q", got, want)
	}
}

func TestParse_Log(t *testing.T) {
	if f := MustParse(t, "jobs: []\n"); f.Log.Format != LogText || f.Log.SlogLevel() != slog.LevelInfo {
		t.Errorf("default log = %+v, want text at info", f.Log)
	}
	f := MustParse(t, "log: {format: json, level: warn}\n")
	if f.Log.Format != LogJSON || f.Log.SlogLevel() != slog.LevelWarn || !f.Has(SectionLog) {
		t.Errorf("log = %+v, want json at warn", f.Log)
	}
	for src, want := range map[string]string{
		"log: {format: xml}\n":    `test.yaml:1:15: log.format: "xml": want text or json`,
		"log: {level: verbose}\n": `test.yaml:1:14: log.level: "verbose": want debug, info, warn or error`,
		"log: {fromat: json}\n":   `test.yaml:1:7: log: unknown field "fromat" (did you mean "format"?)`,
	} {
		if got := problems(t, src); len(got) != 1 || got[0] != want {
			t.Errorf("%q: problems %q, want %q", src, got, want)
		}
	}
}

func TestParse_Telemetry(t *testing.T) {
	if f := MustParse(t, "jobs: []\n"); f.Telemetry.OTLPEndpoint != "" || f.Telemetry.SampleRatio != 1 {
		t.Errorf("default telemetry = %+v, want off with sample ratio 1", f.Telemetry)
	}
	f := MustParse(t, "telemetry: {otlp_endpoint: 'http://127.0.0.1:4318', protocol: grpc, sample_ratio: 0.25, headers: {x-key: '${FENCECRON_API_TOKEN}'}}\n")
	if got := f.Telemetry; got.OTLPEndpoint != "http://127.0.0.1:4318" || got.Protocol != ProtocolGRPC || got.SampleRatio != 0.25 || got.Headers["x-key"] != testEnv["FENCECRON_API_TOKEN"] {
		t.Errorf("telemetry = %+v", got)
	}
	for src, want := range map[string]string{
		"telemetry: {otlp_endpoint: '127.0.0.1:4318'}\n": `test.yaml:1:28: telemetry.otlp_endpoint: "127.0.0.1:4318": want a URL such as http://127.0.0.1:4318`,
		"telemetry: {protocol: http/json}\n":             `test.yaml:1:23: telemetry.protocol: "http/json": want grpc or http/protobuf`,
		"telemetry: {sample_ratio: 2}\n":                 `test.yaml:1:27: telemetry.sample_ratio: 2: want 0 to 1`,
		"telemetry: {sample_ratio: half}\n":              `test.yaml:1:27: telemetry.sample_ratio: expected a number, got "half"`,
	} {
		if got := problems(t, src); len(got) != 1 || got[0] != want {
			t.Errorf("%q: problems %q, want %q", src, got, want)
		}
	}
}

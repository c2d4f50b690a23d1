package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fencecron/fencecron/fencedstore"
)

// Overlap policies: what to do when a job fires while its previous run is
// still open.
const (
	OverlapForbid  = "forbid"
	OverlapAllow   = "allow"
	OverlapReplace = "replace"
)

// Misfire policies: what to do with fire times missed while no leader was
// firing.
const (
	MisfireSkip   = "skip"
	MisfireLatest = "latest"
	MisfireAll    = "all"
)

// Defaults applied by Spec.Normalize.
const (
	DefaultTimeout        = 10 * time.Minute
	DefaultLeaseTTL       = 30 * time.Second
	DefaultBackoff        = 10 * time.Second
	DefaultCatchupWindow  = time.Hour
	DefaultMaxOutputBytes = fencedstore.DefaultMaxBodyBytes
)

// Spec is one job as the user defined it. Its json tags are the API's and
// the replicated log's names of the fields, its yaml tags the config
// file's (the config parser decodes the jobs section straight into it).
type Spec struct {
	// Name is the job's name within its namespace as the config writes
	// it; Normalize makes it the qualified name ("NS:name", or the plain
	// name in the default namespace: see namespace.go), which the
	// replicated state, run ids and the API name the job by.
	Name string `json:"name" yaml:"name"`
	// Namespace is the job's namespace; "" (after Normalize) is the
	// default one.
	Namespace string   `json:"namespace,omitempty" yaml:"namespace"`
	Schedules []string `json:"schedules" yaml:"schedules"`
	Timezone  string   `json:"timezone,omitempty" yaml:"timezone"`
	// Command is an argv list; Shell, if set instead, runs through /bin/sh -c.
	Command        []string          `json:"command,omitempty" yaml:"command"`
	Shell          string            `json:"shell,omitempty" yaml:"shell"`
	Env            map[string]string `json:"env,omitempty" yaml:"env"`
	Dir            string            `json:"dir,omitempty" yaml:"dir"`
	Output         string            `json:"output,omitempty" yaml:"output"`
	Timeout        Duration          `json:"timeout" yaml:"timeout"`
	LeaseTTL       Duration          `json:"lease_ttl" yaml:"lease_ttl"`
	Retries        int               `json:"retries" yaml:"retries"`
	Backoff        Duration          `json:"backoff" yaml:"backoff"`
	Overlap        string            `json:"overlap" yaml:"overlap"`
	Misfire        string            `json:"misfire" yaml:"misfire"`
	CatchupWindow  Duration          `json:"catchup_window" yaml:"catchup_window"`
	Target         map[string]string `json:"target,omitempty" yaml:"target"`
	MaxOutputBytes int64             `json:"max_output_bytes" yaml:"max_output_bytes"`
	Paused         bool              `json:"paused" yaml:"paused"`
	Jitter         Duration          `json:"jitter,omitempty" yaml:"jitter"`
	// DST is the daylight-saving policy of the job's wall-clock schedules.
	DST DSTPolicy `json:"dst" yaml:"dst"`
	// History is how much of the job's finished runs the cluster keeps;
	// a field left at zero takes the cluster's default (cluster.history).
	History History `json:"history,omitzero" yaml:"history"`
	// Notify lists who is told when the job's runs and attempts end
	// (see notify.go).
	Notify []Notify `json:"notify,omitempty" yaml:"notify"`
	// After lists the jobs whose runs for the same scheduled time must
	// all succeed before this job runs (a job with after has no
	// schedule).
	After []string `json:"after,omitempty" yaml:"after"`
	// HTTP, if set instead of Command and Shell, is a request the worker
	// sends (jobs/http.go).
	HTTP *HTTP `json:"http,omitempty" yaml:"http"`
	// Group names the job's concurrency group (the config's top-level
	// groups); GroupLimits are that group's, copied from the file that
	// defines it, so that the job set alone says every limit.
	Group       string `json:"group,omitempty" yaml:"group"`
	GroupLimits *Group `json:"group_limits,omitempty" yaml:"-"`
}

// History bounds a job's run history: the newest Runs finished runs by
// scheduled time, none older than MaxAge. Zero fields mean "the cluster's
// default" (see Resolve).
type History struct {
	Runs   int      `json:"runs,omitempty" yaml:"runs"`
	MaxAge Duration `json:"max_age,omitempty" yaml:"max_age"`
}

// Bounds and defaults of run history.
const (
	// MaxHistoryRuns bounds history.runs: a job's history is listed and
	// trimmed by walking it, and every server keeps a copy.
	MaxHistoryRuns       = 100_000
	DefaultHistoryRuns   = 100
	DefaultHistoryMaxAge = 30 * 24 * time.Hour
)

// DefaultHistory is the cluster's default when its config says nothing.
var DefaultHistory = History{Runs: DefaultHistoryRuns, MaxAge: Duration(DefaultHistoryMaxAge)}

// Resolve returns h with its zero fields taken from def (and, where def
// has zeros too, from DefaultHistory).
func (h History) Resolve(def History) History {
	if h.Runs == 0 {
		h.Runs = def.Runs
	}
	if h.MaxAge == 0 {
		h.MaxAge = def.MaxAge
	}
	if h.Runs == 0 {
		h.Runs = DefaultHistory.Runs
	}
	if h.MaxAge == 0 {
		h.MaxAge = DefaultHistory.MaxAge
	}
	return h
}

// Check returns what is wrong with h as field problems ("runs",
// "max_age"), zero fields allowed when zeroOK (a job's, which default
// to the cluster's).
func (h History) Check(zeroOK bool) []FieldError {
	var errs []FieldError
	if (h.Runs != 0 || !zeroOK) && (h.Runs < 1 || h.Runs > MaxHistoryRuns) {
		errs = append(errs, FieldError{Field: "runs", Index: -1, Msg: fmt.Sprintf("%d: want 1 to %d", h.Runs, MaxHistoryRuns)})
	}
	if (h.MaxAge != 0 || !zeroOK) && h.MaxAge <= 0 {
		errs = append(errs, FieldError{Field: "max_age", Index: -1, Msg: fmt.Sprintf("%s: want a positive duration such as 30d", h.MaxAge)})
	}
	return errs
}

// Normalize fills in defaults for unset fields, and names the job, the
// jobs it follows and its group by their qualified names
// (normalizeNamespace).
func (s *Spec) Normalize() {
	s.normalizeNamespace()
	if s.Timeout == 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	if s.LeaseTTL == 0 {
		s.LeaseTTL = Duration(DefaultLeaseTTL)
	}
	if s.Backoff == 0 {
		s.Backoff = Duration(DefaultBackoff)
	}
	if s.Overlap == "" {
		s.Overlap = OverlapForbid
	}
	if s.Misfire == "" {
		s.Misfire = MisfireLatest
	}
	if s.CatchupWindow == 0 {
		s.CatchupWindow = Duration(DefaultCatchupWindow)
	}
	if s.MaxOutputBytes == 0 {
		s.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	s.DST = s.DST.withDefaults()
}

// Lease returns the job's lease TTL: LeaseTTL, or DefaultLeaseTTL where it
// is not set (Normalize sets it; a spec from before it did may not have
// it). Every reader of a job's lease asks here.
func (s *Spec) Lease() time.Duration {
	if s.LeaseTTL <= 0 {
		return DefaultLeaseTTL
	}
	return s.LeaseTTL.D()
}

// MaxPreStartLease caps the lease of an attempt whose process has not
// started (PreStartLease).
const MaxPreStartLease = time.Second

// PreStartLease is the lease an attempt granted ahead of its fire time
// holds until its process (or request) starts: a third of Lease, at most
// MaxPreStartLease. A worker that dies or is cut off while it waits for
// the fire time has then cost its run this much, not a whole Lease: a
// process that has not started needs no room for a slow unit of work,
// only for a renewal's round trip.
func (s *Spec) PreStartLease() time.Duration {
	return min(MaxPreStartLease, s.Lease()/3)
}

// ProcessLoad is what one open attempt of a process job weighs against
// its node's limit (node.max_attempts, in these units ProcessLoad each):
// the limit is there so that starting processes cannot starve Raft and
// gossip of the CPU. An HTTP job's attempt starts no process and weighs
// 1, so a node holds ProcessLoad requests in flight for each process it
// may run (at 1,000 HTTP fires a second, each attempt open for about a
// second from its grant ahead to its completion, a limit counted in
// attempts capped delivery at 38%).
const ProcessLoad = 8

// AttemptLoad is what one open attempt of s weighs (ProcessLoad).
func (s *Spec) AttemptLoad() int {
	if s.HTTP != nil {
		return 1
	}
	return ProcessLoad
}

// Location returns the job's time zone.
func (s *Spec) Location() (*time.Location, error) {
	if s.Timezone == "" {
		return time.UTC, nil
	}
	return time.LoadLocation(s.Timezone)
}

// Argv returns the argument vector the executor runs.
func (s *Spec) Argv() []string {
	if s.Shell != "" {
		return []string{"/bin/sh", "-c", s.Shell}
	}
	return s.Command
}

// OutputKey renders the job's output key for one scheduled time. It returns
// "" when the job publishes no output.
func (s *Spec) OutputKey(scheduled time.Time) (string, error) {
	if s.Output == "" {
		return "", nil
	}
	loc, err := s.Location()
	if err != nil {
		return "", err
	}
	return s.renderOutput(scheduled, loc)
}

// OutputKeyBeforeV7 renders the job's output key for one scheduled time
// as servers before log version 7 did, with the whole template language
// and no bound. Only a server applying an entry of such a version calls
// it, so that it decides as they did; everything else renders with
// OutputKey.
func (s *Spec) OutputKeyBeforeV7(scheduled time.Time) (string, error) {
	if s.Output == "" {
		return "", nil
	}
	loc, err := s.Location()
	if err != nil {
		return "", err
	}
	data := s.templateData(scheduled, loc)
	b, err := renderUnbounded("output", s.Output, data)
	return fencedstore.NamespacePrefix(s.NamespaceName()) + string(b), err
}

// renderOutput renders the output key template for a scheduled time seen
// in loc, within the bounds of template.go: a key is at most fencedstore.MaxKeyLen
// bytes.
//
// The key of a job of a namespace other than the default one lies under
// the namespace's prefix (fencedstore.NamespacePrefix), the template
// rendering the rest of it.
func (s *Spec) renderOutput(scheduled time.Time, loc *time.Location) (string, error) {
	data := s.templateData(scheduled, loc)
	prefix := fencedstore.NamespacePrefix(s.NamespaceName())
	b, err := renderTemplate("output", s.Output, data, fencedstore.MaxKeyLen-len(prefix))
	if err != nil || prefix == "" {
		return string(b), err
	}
	return prefix + string(b), nil
}

// Duration is a time.Duration that reads and writes as "90s" in JSON.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String returns d in Go duration syntax.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText gives d as a Go duration string, which encoding/json
// quotes. As text it is not scanned again, as a json.Marshaler's output
// is, and that scan was a fifth of encoding a spec: each spec has four
// to six durations, encoded on every apply and for every digest. The
// bytes are those MarshalJSON wrote before (TestDuration_JSON pins a
// hash and a digest), so no hash or digest changes. Being a
// TextMarshaler also changes what a Duration would be as a JSON map key
// or in YAML written by yaml.v3; neither is done, and either would need
// an UnmarshalText to read it back.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}

// UnmarshalJSON reads a Go duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if n := len(b); n >= 2 && b[0] == '"' && b[n-1] == '"' && !bytes.ContainsAny(b[1:n-1], "\\\"") {
		// A plain string, the usual case, without a second decoder.
		s = string(b[1 : n-1])
	} else if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration: %w", err)
		}
		*d = Duration(n)
		return nil
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseDuration reads a Go duration, or one that starts with a whole number
// of days ("30d", "1d12h"): retention is naturally said in days, and a Go
// duration has no unit for them. A day is 24 hours here, whatever the
// clocks do.
func ParseDuration(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok || days == "" || strings.TrimLeft(days, "0123456789") != "" {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseInt(days, 10, 64)
	if err != nil || n > int64(math.MaxInt64/(24*time.Hour)) {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest == "" {
		return d, nil
	}
	r, err := time.ParseDuration(rest)
	if err != nil || r < 0 || d > math.MaxInt64-r {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	return d + r, nil
}
